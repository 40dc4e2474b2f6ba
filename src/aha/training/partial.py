"""Partial rollouts (APRIL, Zhou et al. 2025, arXiv:2509.18521): a round launches
rollout.partial_rollouts groups beyond the ones it needs; sampling stops as soon as enough
groups are complete, and the completions still going are kept, with their tokens and sampling
log-probs so far, to continue first in the next round, on the newer weights.

A few long completions no longer hold a whole round (the long tail of decoding, where the
batch has shrunk to a handful of rows), and nothing sampled is thrown away. A continued
completion mixes tokens drawn by two or more policy versions; each token keeps the log-prob
it was drawn with, so the ratio's denominator is the policy that really drew it (and
old_logprobs=trainer with tis_cap corrects toward the current one, as in asynchronous RL)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from aha.rollout import PartialRound, Rollouts
from aha.rollout.rollouts import left_pad
from aha.tasks import PromptSampler, Task, encode_prompts


@dataclass
class Row:
    """One completion of a group, as far as it has been sampled."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)  # the policy version each token was drawn on
    done: bool = False  # ended at a stop token or at the budget
    truncated: bool = False  # ended at the budget, without a stop token


@dataclass
class Group:
    """A prompt's group_size completions."""

    sample: dict
    prompt: list[int]
    rows: list[Row]

    @property
    def complete(self) -> bool:
        return all(row.done for row in self.rows)

    @property
    def started(self) -> bool:
        return any(row.tokens for row in self.rows)


class PartialRollouts:
    """The groups carried from one round to the next, and the rounds that launch them."""

    def __init__(self, extra: int, group_size: int, max_new_tokens: int):
        self.extra, self.group_size, self.max_new_tokens = extra, group_size, max_new_tokens
        self.carried: list[Group] = []

    def round(self, engine, task: Task, sampler: PromptSampler, needed: int,
              version: int) -> tuple[list[dict], Rollouts, dict]:
        """Sample until `needed` groups are complete: the carried groups first, then fresh
        prompts up to needed + extra groups in all. Returns the samples of the needed groups
        (oldest first), their rollouts (prompt_index into those samples) and statistics;
        every other group is carried. version: the policy version sampling now."""
        if not hasattr(engine, "generate_partial"):
            raise ValueError(f"rollout.partial_rollouts needs an engine that can stop a round early (the HF engine "
                             f"in this process); this run samples with {type(engine).__name__}")
        fresh = sampler.next(max(0, needed + self.extra - len(self.carried)))
        prompts = encode_prompts(engine.tokenizer, task, fresh)
        groups = self.carried + [Group(sample, prompt, [Row() for _ in range(self.group_size)])
                                 for sample, prompt in zip(fresh, prompts)]
        resumed = sum(1 for g in self.carried for row in g.rows if row.tokens and not row.done)
        ready = sum(g.complete for g in groups)
        if ready < needed:
            self._sample(engine, groups, needed - ready, version)
        complete = [g for g in groups if g.complete]
        taken = complete[:needed]
        self.carried = [g for g in groups if not any(g is t for t in taken)]
        rows = [row for g in taken for row in g.rows]
        tokens = sum(len(row.tokens) for row in rows)
        stale = sum(sum(v < version for v in row.versions) for row in rows)
        stats = {"partial/carried_groups": len(self.carried), "partial/resumed_rows": resumed,
                 "partial/stale_token_frac": stale / max(tokens, 1),
                 "partial/max_age": max((version - min(row.versions) for row in rows if row.versions), default=0)}
        return [g.sample for g in taken], self._rollouts(taken, engine), stats

    def _sample(self, engine, groups: list[Group], enough: int, version: int) -> None:
        """One engine call over every unfinished completion, stopping at `enough` more complete
        groups; each row gets what was sampled for it. A group not started yet is one prompt
        with group_size copies (prefilled once); a started one continues row by row, each
        from its own prefix."""
        prompts, copies, budgets, owners, plan_groups = [], [], [], [], []
        for index, group in enumerate(groups):
            if group.complete:
                continue
            if not group.started:
                prompts.append(group.prompt)
                copies.append(self.group_size)
                budgets.append(self.max_new_tokens)
                owners.append(group.rows)
                plan_groups.append(index)
                continue
            for row in group.rows:
                if not row.done:
                    prompts.append(group.prompt + row.tokens)
                    copies.append(1)
                    budgets.append(self.max_new_tokens - len(row.tokens))
                    owners.append([row])
                    plan_groups.append(index)
        out = engine.generate_partial(prompts, PartialRound(copies, budgets, plan_groups, enough))
        at = 0
        for rows in owners:
            for row in rows:
                length = int(out.completion_mask[at].sum())
                row.tokens += out.completion_ids[at, :length].tolist()
                row.logprobs += out.sampling_logprobs[at, :length].tolist()
                row.versions += [version] * length
                row.done = not bool(out.unfinished[at])
                row.truncated = bool(out.truncated[at])
                at += 1

    def _rollouts(self, groups: list[Group], engine) -> Rollouts:
        rows = [(group.prompt, row) for group in groups for row in group.rows]
        prompt_ids, prompt_mask = left_pad([prompt for prompt, _ in rows], engine.pad_id)
        width = max(len(row.tokens) for _, row in rows)
        completion = torch.full((len(rows), width), engine.pad_id, dtype=torch.long)
        mask, logprobs = torch.zeros(len(rows), width), torch.zeros(len(rows), width)
        for i, (_, row) in enumerate(rows):
            completion[i, :len(row.tokens)] = torch.tensor(row.tokens, dtype=torch.long)
            mask[i, :len(row.tokens)] = 1.0
            logprobs[i, :len(row.tokens)] = torch.tensor(row.logprobs)
        texts = engine.tokenizer.batch_decode(completion, skip_special_tokens=True)
        prompt_index = torch.arange(len(groups)).repeat_interleave(self.group_size)
        truncated = torch.tensor([row.truncated for _, row in rows], dtype=torch.bool)
        return Rollouts(prompt_ids, prompt_mask, completion, mask, logprobs, prompt_index, texts, truncated)

    def state(self) -> dict:
        return {"carried": [asdict(group) for group in self.carried]}

    def load_state(self, state: dict) -> None:
        self.carried = [Group(g["sample"], g["prompt"], [Row(**row) for row in g["rows"]]) for g in state["carried"]]
