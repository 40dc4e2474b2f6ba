"""Sampling from the policy's own Hugging Face modules (KV cache), token in, token out."""

from __future__ import annotations

import math

import torch

from aha.models.compute import FP32Head, attention_for, attention_scores, autocast, plain_head, positions_from_mask
from aha.rollout.kv_cache import decoding_cache
from aha.rollout.llama_decoding import LlamaDecoding
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

    def _generate_chunk(self, prompts: list[list[int]], group_size: int, greedy: bool, max_new_tokens: int):
        distinct_ids, distinct_mask = left_pad(prompts, self.pad_id)
        prompt_ids = distinct_ids.repeat_interleave(group_size, dim=0)
        prompt_mask = distinct_mask.repeat_interleave(group_size, dim=0)
        temperature = 1.0 if greedy else self.temperature
        was_training = self.model.training
        self.model.eval()
        try:
            completion, logprobs, certainty = self._decode(distinct_ids, distinct_mask, group_size, greedy,
                                                           temperature, max_new_tokens)
        finally:
            self.model.train(was_training)
        is_eos = torch.isin(completion, torch.tensor(self.eos_ids))
        # valid = up to and including the first EOS
        before_eos = (is_eos.cumsum(dim=1) - is_eos.long()) == 0
        mask = before_eos.float()
        truncated = ~is_eos.any(dim=1)
        completion = completion.masked_fill(~before_eos, self.pad_id)
        texts = self.tokenizer.batch_decode(completion, skip_special_tokens=True)
        index = torch.zeros(len(texts), dtype=torch.long)  # set by generate()
        certainty = certainty * mask if self.self_certainty else None
        return Rollouts(prompt_ids, prompt_mask, completion, mask, logprobs * mask, index, texts, truncated, certainty)

    def _decode(self, distinct_ids, distinct_mask, group_size: int, greedy: bool, temperature: float,
                max_new_tokens: int):
        """The sampling loop: each distinct prompt is run once (its KV cache then repeated for
        the group), then one token a step for the rows still going; a row leaves the batch
        (and the cache) at its stop token. The backbone runs under autocast, the LM head in
        fp32 as the learner's does, so the sampling log-probs are the learner's up to the
        backbone's rounding. Returns (N, T) tokens (pad after a stop), log-probs and
        self-certainty, T <= max_new_tokens."""
        backbone, config = self.model.base_model, self.model.config
        plain = plain_head(self.model)
        head = None if plain is None else FP32Head(plain.weight, plain.bias)
        N = distinct_ids.shape[0] * group_size
        tokens = torch.full((N, max_new_tokens), self.pad_id, dtype=torch.long)
        logprobs = torch.zeros(N, max_new_tokens)
        certainty = torch.zeros(N, max_new_tokens)
        stop = torch.tensor(self.eos_ids)
        cache = decoding_cache(config, max_new_tokens)
        mask = distinct_mask.long()
        positions = positions_from_mask(mask)
        # one autocast block for the whole loop: autocast keeps its bf16 copies of the weights
        # until the block ends, so they are cast once, not at every step
        with autocast(self.dtype):
            with attention_for(backbone, attention_scores(config, mask.shape[0], mask.shape[1], mask.shape[1])):
                hidden = backbone(input_ids=distinct_ids, attention_mask=mask, position_ids=positions,
                                  past_key_values=cache, use_cache=True).last_hidden_state[:, -1]
            cache.batch_repeat_interleave(group_size)
            hidden = hidden.repeat_interleave(group_size, dim=0)
            mask = mask.repeat_interleave(group_size, dim=0)
            next_position = positions[:, -1].repeat_interleave(group_size) + 1
            # Llama models decode on a lean step of their own (rollout/llama_decoding.py)
            decoding = LlamaDecoding(self.model, self.dtype, cache) if LlamaDecoding.fits(self.model, cache) else None
            rows = torch.arange(N)  # the rows still going, in cache order
            steps = 0
            for t in range(max_new_tokens):
                logits = head(hidden) if head is not None \
                    else self.model.get_output_embeddings()(hidden).float()
                if self.self_certainty:  # of the raw logits, before the draw overwrites them
                    certainty[rows, t] = token_certainty(logits)
                picked, logprobs[rows, t] = draw(logits, temperature, self.top_p, greedy, t)
                tokens[rows, t] = picked
                steps = t + 1
                going = ~torch.isin(picked, stop)
                if t == max_new_tokens - 1 or not going.any():
                    break
                if not going.all():  # finished rows leave the batch
                    keep = going.nonzero().squeeze(1)
                    cache.batch_select_indices(keep)
                    rows, picked, mask, next_position = rows[keep], picked[keep], mask[keep], next_position[keep]
                mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
                if decoding is not None:
                    hidden = decoding.step(picked, next_position, mask)
                else:
                    with attention_for(backbone, attention_scores(config, len(mask), 1, mask.shape[1])):
                        hidden = backbone(input_ids=picked[:, None], attention_mask=mask,
                                          position_ids=next_position[:, None], past_key_values=cache,
                                          use_cache=True).last_hidden_state[:, -1]
                next_position = next_position + 1
        return tokens[:, :steps], logprobs[:, :steps], certainty[:, :steps]


def draw(logits: torch.Tensor, temperature: float, top_p: float, greedy: bool, step: int = 0):
    """One token a row from softmax(logits / temperature) (argmax when greedy) and its
    log-prob under that distribution; `logits` (N, V) fp32 is overwritten.

    Scaled as the learner scales (times 1 / temperature), then shifted by the row's maximum
    and exponentiated in place: the draw's weights and log Z's sum come from one tensor, and
    the picked token's log-prob is log(weight) - log(sum of weights), as logsumexp computes
    it (a drawn token has a positive weight). At 256 rows x 49152 every new (N, V) tensor was
    a fresh 50 MB, 17 ms each on Zen 4: none is made here but the draw's cumulative sums."""
    if temperature != 1.0 and not greedy:
        logits.mul_(1.0 / temperature)
    best = logits.argmax(dim=1) if greedy else None  # of the logits themselves: exp may tie near neighbours
    top = logits.amax(dim=1, keepdim=True)
    weights = logits.sub_(top).exp_()
    log_total = weights.sum(dim=1).log_()
    if not torch.isfinite(log_total).all():  # the draw below would return an arbitrary token
        raise FloatingPointError(f"the policy's logits are not finite at sampling step {step} "
                                 "(diverged weights?): nothing was sampled from them")
    picked = best if greedy else _sample(weights, top_p)
    return picked, weights.gather(1, picked[:, None]).squeeze(1).log_() - log_total


def _sample(weights: torch.Tensor, top_p: float) -> torch.Tensor:
    """One token a row, drawn with probability proportional to `weights` (N, V), which are
    exp(scaled logits) up to a factor a row, by inverse transform: a uniform draw a row
    against the cumulative weights (torch.multinomial draws one exponential number per
    vocabulary entry, which took a quarter of a sampling step). top_p < 1 keeps the smallest
    set of most probable tokens whose mass reaches top_p (the nucleus), renormalised.
    `weights` is left as it was."""
    order = None
    if top_p < 1.0:
        weights, order = weights.sort(dim=1, descending=True)
        # a token stays while the mass before it is under top_p (the most probable always stays)
        cdf = weights.cumsum(dim=1)
        weights.masked_fill_(cdf - weights >= top_p * cdf[:, -1:], 0.0)
    cdf = weights.cumsum(dim=1)
    u = torch.rand(len(weights), 1) * cdf[:, -1:]
    # right=True: a draw equal to a boundary goes to the next token, so zero-probability
    # tokens (flat stretches of the cdf) are never picked
    at = torch.searchsorted(cdf, u, right=True).clamp_(max=weights.shape[1] - 1)
    return (at if order is None else order.gather(1, at)).squeeze(1)


def token_certainty(logits: torch.Tensor) -> torch.Tensor:
    """(N,): KL(U || p) = -log V - mean_j log p(j) of one step's raw logits (N, V).
    0 for a uniform distribution, log V for a certain one."""
    return -math.log(logits.shape[-1]) - torch.log_softmax(logits.float(), dim=-1).mean(dim=-1)
