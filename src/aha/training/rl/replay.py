"""Selective sample replay (VL-Rethinker, Wang et al. 2025): keep recent groups that had
non-zero advantage and use them to fill steps where too few fresh groups were informative."""

from __future__ import annotations

import torch

from aha.algorithms import masked_mean, replay_priorities
from aha.training.rl.batch import Batch, concat_batches, group_rows


class ReplayBuffer:
    """Whole groups with their rollouts, rewards and advantages as computed when sampled.

    Replayed groups are off-policy: the importance ratio against their stored sampling
    log-probs (and the clip) accounts for the policy having moved since."""

    def __init__(self, capacity: int, alpha: float, group_size: int):
        self.capacity, self.alpha, self.G = capacity, alpha, group_size
        self.groups: list[Batch] = []

    def add(self, batch: Batch) -> None:
        """Store the batch's groups with any non-zero advantage; the oldest fall out."""
        G = self.G
        for g in range(len(batch) // G):
            rows = group_rows(torch.tensor([g]), G)
            if batch.advantages[rows].abs().sum() > 0:
                group = batch.select(rows)
                # keep only what a replayed group needs; the rest is recomputed for the step
                self.groups.append(Batch(group.rollouts, group.rewards, group.baseline, advantages=group.advantages))
        self.groups = self.groups[-self.capacity:]

    def fill(self, batch: Batch | None, groups_wanted: int, pad_id: int) -> tuple[Batch | None, int]:
        """Top the batch up to groups_wanted groups with stored groups drawn without
        replacement, with probability proportional to |A|^alpha. Returns (batch, replayed)."""
        have = 0 if batch is None else len(batch) // self.G
        missing = min(groups_wanted - have, len(self.groups))
        if missing <= 0:
            return batch, 0
        priority = torch.stack([masked_mean(g.advantages.abs(), g.rollouts.completion_mask) for g in self.groups])
        picked = torch.multinomial(replay_priorities(priority, self.alpha), missing, replacement=False).tolist()
        replayed = [self.groups[i] for i in picked]
        fresh = [] if batch is None else [Batch(batch.rollouts, batch.rewards, batch.baseline,
                                                advantages=batch.advantages)]
        return concat_batches(fresh + replayed, pad_id), missing

    def state(self) -> list[Batch]:
        return self.groups

    def load_state(self, groups: list[Batch]) -> None:
        self.groups = list(groups)
