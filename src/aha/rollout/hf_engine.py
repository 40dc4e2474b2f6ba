"""Sampling with Hugging Face `generate` (KV cache), token in, token out."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from aha.training.logprobs import positions_from_mask
from aha.training.precision import autocast


@dataclass
class Rollouts:
    """N sampled sequences. Prompts are left-padded, completions right-padded.

    completion_mask covers each completion up to and including its EOS token.
    sampling_logprobs are log pi(token | prefix) at the sampling temperature, computed by
    the engine at sampling time; the learner uses them as the "old" policy."""

    prompt_ids: torch.Tensor  # (N, P) long
    prompt_mask: torch.Tensor  # (N, P) long
    completion_ids: torch.Tensor  # (N, T) long
    completion_mask: torch.Tensor  # (N, T) float
    sampling_logprobs: torch.Tensor  # (N, T) float
    prompt_index: torch.Tensor  # (N,) long: which input prompt each sequence answers
    texts: list[str]
    truncated: torch.Tensor  # (N,) bool: hit max_new_tokens without EOS
    # (N, T) KL(uniform || p) of each next-token distribution at temperature 1, the
    # per-token self-certainty of Kang et al. 2025; only from an engine made with
    # self_certainty=True (evaluation), None otherwise
    certainty: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)

    def select(self, index: torch.Tensor) -> "Rollouts":
        index = index.long()
        return Rollouts(
            self.prompt_ids[index], self.prompt_mask[index], self.completion_ids[index],
            self.completion_mask[index], self.sampling_logprobs[index], self.prompt_index[index],
            [self.texts[i] for i in index.tolist()], self.truncated[index],
            None if self.certainty is None else self.certainty[index],
        )


def _left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


def _pad_to(t: torch.Tensor, width: int, value, left: bool = False) -> torch.Tensor:
    extra = width - t.shape[1]
    if extra == 0:
        return t
    return F.pad(t, (extra, 0) if left else (0, extra), value=value)


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """Stack rollouts of different widths (prompts re-padded left, completions right)."""
    if len(parts) == 1:
        return parts[0]
    P = max(p.prompt_ids.shape[1] for p in parts)
    T = max(p.completion_ids.shape[1] for p in parts)
    stack = lambda name, width, value, left=False: torch.cat([_pad_to(getattr(p, name), width, value, left) for p in parts])
    return Rollouts(
        prompt_ids=stack("prompt_ids", P, pad_id, left=True),
        prompt_mask=stack("prompt_mask", P, 0, left=True),
        completion_ids=stack("completion_ids", T, pad_id),
        completion_mask=stack("completion_mask", T, 0.0),
        sampling_logprobs=stack("sampling_logprobs", T, 0.0),
        prompt_index=torch.cat([p.prompt_index for p in parts]),
        texts=[t for p in parts for t in p.texts],
        truncated=torch.cat([p.truncated for p in parts]),
        certainty=None if any(p.certainty is None for p in parts) else stack("certainty", T, 0.0),
    )


class HFEngine:
    def __init__(self, model, tokenizer, max_new_tokens: int, temperature: float = 1.0,
                 top_p: float = 1.0, batch_size: int = 64, dtype: torch.dtype = torch.float32,
                 self_certainty: bool = False):
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.batch_size = batch_size
        self.dtype = dtype
        self.self_certainty = self_certainty
        self.pad_id = tokenizer.pad_token_id
        eos = model.generation_config.eos_token_id
        eos = eos if isinstance(eos, list) else [eos]
        self.eos_ids = sorted({tokenizer.eos_token_id, *[e for e in eos if e is not None]})

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
        distinct_ids, distinct_mask = _left_pad(prompts, self.pad_id)
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
