"""Sampling from the policy's own Hugging Face modules (KV cache), token in, token out."""

from __future__ import annotations

import math

import torch

from aha.models.compute import (
    FP32Head,
    attention_for,
    attention_scores,
    autocast,
    on_device,
    plain_head,
    positions_from_mask,
)
from aha.rollout.kv_cache import decoding_cache
from aha.rollout.llama_decoding import LlamaDecoding
from aha.rollout.rollouts import PartialRound, Rollouts, concat_rollouts, left_pad
from aha.rollout.settings import EngineSettings


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
                 max_new_tokens: int | None = None, temperature: float | None = None) -> Rollouts:
        """Sample group_size completions for each prompt (consecutive in the output).

        A chunk holds whole groups, so each distinct prompt is prefilled once and its KV
        cache shared by the group's G samples."""
        budget = max_new_tokens or self.max_new_tokens
        rollouts = self._generate(prompts, [group_size] * len(prompts), [budget] * len(prompts), greedy, None,
                                  temperature)
        rollouts.unfinished = None
        return rollouts

    @torch.no_grad()
    def generate_partial(self, prompts: list[list[int]], plan: PartialRound) -> Rollouts:
        """Sample as plan says (APRIL's partial rollouts, rollout/rollouts.PartialRound): each
        prompt plan.copies[i] times with its own budget, stopping once plan.enough groups are
        complete; prompts not started by then come back with no tokens, unfinished."""
        return self._generate(prompts, plan.copies, plan.budgets, False, _GroupTally(plan))

    def _generate(self, prompts, copies: list[int], budgets: list[int], greedy: bool, tally,
                  temperature: float | None = None) -> Rollouts:
        chunks, start = [], 0
        while start < len(prompts):  # a chunk: whole prompts, at most batch_size rows (at least one prompt)
            end, rows = start + 1, copies[start]
            while end < len(prompts) and rows + copies[end] <= self.batch_size:
                rows += copies[end]
                end += 1
            chunks.append(self._generate_chunk(prompts[start:end], torch.tensor(copies[start:end]),
                                               torch.tensor(budgets[start:end]), greedy, tally, start, temperature))
            start = end
        rollouts = concat_rollouts(chunks, self.pad_id)
        rollouts.prompt_index = torch.arange(len(prompts)).repeat_interleave(torch.tensor(copies))
        return rollouts

    def _generate_chunk(self, prompts: list[list[int]], copies: torch.Tensor, budgets: torch.Tensor, greedy: bool,
                        tally, first_prompt: int, temperature: float | None = None):
        distinct_ids, distinct_mask = left_pad(prompts, self.pad_id)
        prompt_ids = distinct_ids.repeat_interleave(copies, dim=0)
        prompt_mask = distinct_mask.repeat_interleave(copies, dim=0)
        budgets = budgets.repeat_interleave(copies)
        temperature = 1.0 if greedy else (self.temperature if temperature is None else temperature)
        groups = None
        if tally is not None:
            groups = tally.groups_of(first_prompt, len(prompts)).repeat_interleave(copies)
        if tally is not None and tally.enough_done():  # nothing of this chunk is needed this round
            N = len(prompt_ids)
            completion, logprobs = torch.empty(N, 0, dtype=torch.long), torch.zeros(N, 0)
            certainty, lengths = torch.zeros(N, 0), torch.zeros(N, dtype=torch.long)
        else:
            was_training = self.model.training
            self.model.eval()
            try:
                completion, logprobs, certainty, lengths = self._decode(
                    distinct_ids, distinct_mask, copies, budgets, greedy, temperature, groups, tally)
            finally:
                self.model.train(was_training)
        # a row is its first `length` tokens: up to and including its stop token, or its budget
        # (pad may be a stop id, so the mask comes from the lengths, not from the tokens)
        mask = torch.arange(completion.shape[1]) < lengths[:, None]
        stopped = torch.zeros(len(lengths), dtype=torch.bool)
        if completion.shape[1]:
            last = completion.gather(1, (lengths - 1).clamp(min=0)[:, None]).squeeze(1)
            stopped = (lengths > 0) & torch.isin(last, torch.tensor(self.eos_ids))
        unfinished = ~stopped & (lengths < budgets)
        truncated = ~stopped & ~unfinished
        completion = completion.masked_fill(~mask, self.pad_id)
        mask = mask.float()
        texts = self.tokenizer.batch_decode(completion, skip_special_tokens=True)
        index = torch.zeros(len(texts), dtype=torch.long)  # set by _generate()
        certainty = certainty * mask if self.self_certainty else None
        return Rollouts(prompt_ids, prompt_mask, completion, mask, logprobs * mask, index, texts, truncated, certainty,
                        unfinished)

    def _decode(self, distinct_ids, distinct_mask, copies: torch.Tensor, budgets: torch.Tensor, greedy: bool,
                temperature: float, groups: torch.Tensor | None = None, tally=None):
        """The sampling loop: each distinct prompt is run once (its KV cache then repeated for
        its copies), then one token a step for the rows still going; a row leaves the batch
        (and the cache) at its stop token or its budget. The backbone runs under autocast, the
        LM head in fp32 as the learner's does, so the sampling log-probs are the learner's up
        to the backbone's rounding. With a tally (partial rollouts) the loop also stops once
        enough groups are complete. Returns (N, T) tokens (pad after a row's end), log-probs,
        self-certainty and each row's length, T <= the largest budget, on the CPU (the loop runs
        on the model's device)."""
        backbone, config, device = self.model.base_model, self.model.config, self.model.device
        distinct_ids, distinct_mask, copies, budgets = on_device(device, distinct_ids, distinct_mask, copies, budgets)
        plain = plain_head(self.model)
        head = None if plain is None else FP32Head(plain.weight, plain.bias)
        N = int(copies.sum())
        max_new_tokens = int(budgets.max())
        lengths = torch.zeros(N, dtype=torch.long, device=device)
        tokens = torch.full((N, max_new_tokens), self.pad_id, dtype=torch.long, device=device)
        logprobs = torch.zeros(N, max_new_tokens, device=device)
        certainty = torch.zeros(N, max_new_tokens, device=device)
        stop = torch.tensor(self.eos_ids, device=device)
        cache = decoding_cache(config, max_new_tokens)
        # one autocast block for the whole loop: autocast keeps its bf16 copies of the weights
        # until the block ends, so they are cast once, not at every step
        with autocast(self.dtype, device):
            hidden, mask, next_position = _prefill(backbone, distinct_ids, distinct_mask, copies, cache)
            # Llama models decode on a lean step of their own (rollout/llama_decoding.py)
            decoding = LlamaDecoding(self.model, self.dtype, cache) if LlamaDecoding.fits(self.model, cache) else None
            rows = torch.arange(N, device=device)  # the rows still going, in cache order
            steps = 0
            for t in range(max_new_tokens):
                logits = head(hidden) if head is not None \
                    else self.model.get_output_embeddings()(hidden).float()
                if self.self_certainty:  # of the raw logits, before the draw overwrites them
                    certainty[rows, t] = token_certainty(logits)
                picked, logprobs[rows, t] = draw(logits, temperature, self.top_p, greedy, t)
                tokens[rows, t] = picked
                steps = t + 1
                going = ~torch.isin(picked, stop) & (budgets[rows] > steps)
                lengths[rows] = steps
                if tally is not None:
                    tally.finished(groups[rows[~going].cpu()])
                    if tally.enough_done():  # the rows still going are carried as they are
                        break
                if not going.any():
                    break
                if not going.all():  # finished rows leave the batch
                    keep = going.nonzero().squeeze(1)
                    cache.batch_select_indices(keep)
                    rows, picked, mask, next_position = rows[keep], picked[keep], mask[keep], next_position[keep]
                mask = torch.cat([mask, mask.new_ones(len(rows), 1)], dim=1)
                hidden = _next_hidden(backbone, decoding, cache, picked, next_position, mask)
                next_position = next_position + 1
        return on_device(torch.device("cpu"), tokens[:, :steps], logprobs[:, :steps], certainty[:, :steps], lengths)


def _prefill(backbone, distinct_ids: torch.Tensor, distinct_mask: torch.Tensor, copies: torch.Tensor, cache
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each distinct prompt through the backbone once, its KV cache and last hidden state then
    repeated for its copies: (hidden, attention mask, next position) a row."""
    config = backbone.config
    mask = distinct_mask.long()
    positions = positions_from_mask(mask)
    with attention_for(backbone, attention_scores(config, mask.shape[0], mask.shape[1], mask.shape[1])):
        hidden = backbone(input_ids=distinct_ids, attention_mask=mask, position_ids=positions,
                          past_key_values=cache, use_cache=True).last_hidden_state[:, -1]
    cache.batch_repeat_interleave(copies)
    return (hidden.repeat_interleave(copies, dim=0), mask.repeat_interleave(copies, dim=0),
            positions[:, -1].repeat_interleave(copies) + 1)


def _next_hidden(backbone, decoding, cache, picked: torch.Tensor, next_position: torch.Tensor,
                 mask: torch.Tensor) -> torch.Tensor:
    """Each row's hidden state after its newest token: the lean Llama step where it fits, else
    the backbone's own forward over the cache."""
    if decoding is not None:
        return decoding.step(picked, next_position, mask)
    with attention_for(backbone, attention_scores(backbone.config, len(mask), 1, mask.shape[1])):
        return backbone(input_ids=picked[:, None], attention_mask=mask, position_ids=next_position[:, None],
                        past_key_values=cache, use_cache=True).last_hidden_state[:, -1]


class _GroupTally:
    """How many completions of each group of a PartialRound are still going, across chunks."""

    def __init__(self, plan: PartialRound):
        self.plan = plan
        groups = torch.tensor(plan.groups, dtype=torch.long)
        self.left = torch.zeros(int(groups.max()) + 1 if len(groups) else 0, dtype=torch.long)
        self.left.index_add_(0, groups, torch.tensor(plan.copies, dtype=torch.long))
        self.present = self.left > 0  # group ids the plan does not use are not complete groups

    def groups_of(self, first_prompt: int, count: int) -> torch.Tensor:
        return torch.tensor(self.plan.groups[first_prompt:first_prompt + count], dtype=torch.long)

    def finished(self, groups: torch.Tensor) -> None:
        self.left.index_add_(0, groups, torch.full_like(groups, -1))

    def enough_done(self) -> bool:
        return int(((self.left == 0) & self.present).sum()) >= self.plan.enough


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
    # drawn by the CPU's generator on every device: the checkpoint's RNG state resumes it exactly
    u = torch.rand(len(weights), 1).to(weights.device) * cdf[:, -1:]
    # right=True: a draw equal to a boundary goes to the next token, so zero-probability
    # tokens (flat stretches of the cdf) are never picked
    at = torch.searchsorted(cdf, u, right=True).clamp_(max=weights.shape[1] - 1)
    return (at if order is None else order.gather(1, at)).squeeze(1)


def token_certainty(logits: torch.Tensor) -> torch.Tensor:
    """(N,): KL(U || p) = -log V - mean_j log p(j) of one step's raw logits (N, V).
    0 for a uniform distribution, log V for a certain one."""
    return -math.log(logits.shape[-1]) - torch.log_softmax(logits.float(), dim=-1).mean(dim=-1)
