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

import logging
from dataclasses import asdict, dataclass, field

import torch

from aha.rollout import PartialRound, Rollouts
from aha.rollout.rollouts import rollouts_from_samples
from aha.tasks import PromptSampler, Task, encode_prompts

log = logging.getLogger(__name__)


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


@dataclass
class Launch:
    """A round on its way to the engine: its groups, the prompts sent (each with the rows it
    feeds, in order) and the plan that says when the engine may stop."""

    groups: list[Group]
    needed: int
    prompts: list[list[int]] = field(default_factory=list)
    owners: list[list[Row]] = field(default_factory=list)
    plan: PartialRound | None = None


class PartialRollouts:
    """The groups carried from one round to the next, and the rounds that launch them."""

    def __init__(self, extra: int, group_size: int, max_new_tokens: int):
        self.extra, self.group_size, self.max_new_tokens = extra, group_size, max_new_tokens
        self.carried: list[Group] = []
        self.last_stats: dict = {}  # of the last round landed

    def round(self, engine, task: Task, sampler: PromptSampler, needed: int,
              version: int) -> tuple[list[dict], Rollouts]:
        """Sample until `needed` groups are complete: the carried groups first, then fresh
        prompts up to needed + extra groups in all. Returns the samples of the needed groups
        (oldest first) and their rollouts (prompt_index into those samples); every other
        group is carried. version: the policy version sampling now."""
        launch = self.launch(engine.tokenizer, task, sampler, needed)
        out = engine.generate_partial(launch.prompts, launch.plan) if launch.prompts else None
        return self.land(launch, out, engine, version)

    def launch(self, tokenizer, task: Task, sampler: PromptSampler, needed: int) -> Launch:
        """The next round: the carried groups (they leave the carry until it lands) and fresh
        prompts up to needed + extra groups. A group not started yet is one prompt with
        group_size copies (the HF engine prefills it once); a started one continues row by row, each from its
        own prefix. No prompts when enough carried groups are complete already."""
        fresh = sampler.next(max(0, needed + self.extra - len(self.carried)))
        groups = self.carried + [Group(sample, prompt, [Row() for _ in range(self.group_size)])
                                 for sample, prompt in zip(fresh, encode_prompts(tokenizer, task, fresh))]
        launch = Launch(groups, needed)
        self.carried = []
        for row in (row for group in groups for row in group.rows):
            if not row.done and len(row.tokens) >= self.max_new_tokens:  # rollout.max_new_tokens lowered on resume
                row.done = row.truncated = True
        enough = needed - sum(group.complete for group in groups)
        if enough <= 0:
            return launch
        copies, budgets, plan_groups = [], [], []
        for index, group in enumerate(groups):
            if group.complete:
                continue
            pending = [group.rows] if not group.started else [[row] for row in group.rows if not row.done]
            for rows in pending:
                launch.prompts.append(group.prompt + rows[0].tokens)
                copies.append(len(rows))
                budgets.append(self.max_new_tokens - len(rows[0].tokens))
                launch.owners.append(rows)
                plan_groups.append(index)
        launch.plan = PartialRound(copies, budgets, plan_groups, enough)
        return launch

    def land(self, launch: Launch, out: Rollouts | None, engine, version: int) -> tuple[list[dict], Rollouts]:
        """Give each row what the engine sampled for it (out, in the launch's prompt order;
        None when nothing was launched), then take `needed` complete groups, oldest first, and
        carry the rest (last_stats says how it went). version: the policy version the round
        was sampled on."""
        resumed = sum(1 for rows in launch.owners if rows[0].tokens)
        at = 0
        for rows in launch.owners:
            for row in rows:
                length = int(out.completion_mask[at].sum())
                row.tokens += out.completion_ids[at, :length].tolist()
                row.logprobs += out.sampling_logprobs[at, :length].tolist()
                row.versions += [version] * length
                row.done = not bool(out.unfinished[at])
                row.truncated = bool(out.truncated[at])
                at += 1
        taken = [group for group in launch.groups if group.complete][:launch.needed]
        self.carried += [group for group in launch.groups if not any(group is t for t in taken)]
        rows = [row for group in taken for row in group.rows]
        tokens = sum(len(row.tokens) for row in rows)
        stale = sum(sum(v < version for v in row.versions) for row in rows)
        self.last_stats = {
            "partial/carried_groups": len(self.carried), "partial/resumed_rows": resumed,
            "partial/stale_token_frac": stale / max(tokens, 1),
            "partial/max_age": max((version - min(row.versions) for row in rows if row.versions), default=0)}
        return [group.sample for group in taken], self._rollouts(taken, engine)

    def _rollouts(self, groups: list[Group], engine) -> Rollouts:
        rows = [(group.prompt, row) for group in groups for row in group.rows]
        return rollouts_from_samples([prompt for prompt, _ in rows], [(row.tokens, row.logprobs) for _, row in rows],
                                     [row.truncated for _, row in rows],
                                     torch.arange(len(groups)).repeat_interleave(self.group_size),
                                     engine.tokenizer, engine.pad_id)

    def state(self, in_flight: list[Launch] = ()) -> dict:
        """The carried groups, with every group of the rounds still in flight (asynchronous RL)
        first, as they were launched (their fresh prompts not started): after a resume they
        are launched again from there."""
        groups = [group for launch in in_flight for group in launch.groups] + self.carried
        return {"carried": [asdict(group) for group in groups]}

    def load_state(self, state: dict) -> None:
        groups = [Group(g["sample"], g["prompt"], [Row(**row) for row in g["rows"]]) for g in state["carried"]]
        self.carried = [group for group in groups if len(group.rows) == self.group_size]
        if len(self.carried) < len(groups):  # rollout.group_size changed on resume: they cannot be trained as groups
            log.warning("%d carried groups of another group size are dropped (rollout.group_size is now %d)",
                        len(groups) - len(self.carried), self.group_size)
