"""Sampling with Hugging Face `generate` (KV cache), token in, token out."""

from __future__ import annotations

import math
import torch

from aha.models.compute import autocast, positions_from_mask
from aha.rollout.settings import EngineSettings
from aha.rollout.rollouts import Rollouts, concat_rollouts, left_pad


class HFEngine(EngineSettings):
    """Samples from the policy's own modules: nothing is ever copied (sync_seconds stays 0)."""

    def __init__(self, model, tokenizer, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, batch_size: int = 64, dtype: torch.dtype = torch.float32,
                 self_certainty: bool = False):
        super().__init__(model, tokenizer, max_new_tokens, temperature, top_p, batch_size, dtype)
        self.self_certainty = self_certainty

    def close(self) -> None:
        pass

    def sync_weights(self, model) -> None:
        """Nothing to copy: this engine samples from the policy's own modules. Any other
        model is a wiring error."""
        if model is not self.model:
            raise ValueError("HFEngine samples from the model it was built on; build a new engine for another model")

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], group_size: int = 1, greedy: bool = False,
                 max_new_tokens: int | None = None) -> Rollouts:
        """Sample group_size completions for each prompt (consecutive in the output).

        A chunk holds whole groups, so each distinct prompt is prefilled once and its KV
        cache shared by the group's G samples."""
        per_chunk = max(1, self.batch_size // group_size)
        chunks = [self._generate_chunk(prompts[i:i + per_chunk], group_size, greedy, max_new_tokens or self.max_new_tokens)
                  for i in range(0, len(prompts), per_chunk)]
        rollouts = concat_rollouts(chunks, self.pad_id)
        rollouts.prompt_index = torch.arange(len(prompts)).repeat_interleave(group_size)
        return rollouts

    def _prefill(self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int):
        """KV cache of all prompt tokens but the last, computed once per distinct prompt and
        repeated for the group; generate() then runs only the last prompt token."""
        from transformers import DynamicCache

        if group_size == 1 or prompt_ids.shape[1] < 2:
            return None
        ids, mask = prompt_ids[:, :-1], prompt_mask[:, :-1]
        cache = DynamicCache(config=self.model.config)
        self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                              past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(group_size)
        return cache

    def _generate_chunk(self, prompts: list[list[int]], group_size: int, greedy: bool, max_new_tokens: int):
        distinct_ids, distinct_mask = left_pad(prompts, self.pad_id)
        prompt_ids = distinct_ids.repeat_interleave(group_size, dim=0)
        prompt_mask = distinct_mask.repeat_interleave(group_size, dim=0)
        # top_k=0 turns off generate's default top-k of 50: sample from the full distribution
        sampling = {"do_sample": False} if greedy else {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": 0}
        was_training = self.model.training
        self.model.eval()
        with autocast(self.dtype):
            cache = self._prefill(distinct_ids, distinct_mask, group_size)
            out = self.model.generate(
                input_ids=prompt_ids, attention_mask=prompt_mask, max_new_tokens=max_new_tokens,
                **sampling, pad_token_id=self.pad_id, eos_token_id=self.eos_ids,
                past_key_values=cache, output_logits=True, return_dict_in_generate=True,
            )
        self.model.train(was_training)
        completion = out.sequences[:, prompt_ids.shape[1]:]
        temperature = 1.0 if greedy else self.temperature
        logprobs = torch.stack([
            torch.log_softmax(step.float() / temperature, dim=-1).gather(1, completion[:, t:t + 1]).squeeze(1)
            for t, step in enumerate(out.logits)
        ], dim=1)
        is_eos = torch.isin(completion, torch.tensor(self.eos_ids))
        # valid = up to and including the first EOS
        before_eos = (is_eos.cumsum(dim=1) - is_eos.long()) == 0
        mask = before_eos.float()
        truncated = ~is_eos.any(dim=1)
        completion = completion.masked_fill(~before_eos, self.pad_id)
        texts = self.tokenizer.batch_decode(completion, skip_special_tokens=True)
        index = torch.zeros(len(texts), dtype=torch.long)  # set by generate()
        certainty = token_certainty(out.logits) * mask if self.self_certainty else None
        return Rollouts(prompt_ids, prompt_mask, completion, mask, logprobs * mask, index, texts, truncated, certainty)


def token_certainty(logits: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """(N, T): KL(U || p_t) = -log V - mean_j log p_t(j) for each step's raw logits (N, V).
    0 for a uniform distribution, log V for a certain one."""
    return torch.stack([-math.log(step.shape[-1]) - torch.log_softmax(step.float(), dim=-1).mean(dim=-1)
                        for step in logits], dim=1)
