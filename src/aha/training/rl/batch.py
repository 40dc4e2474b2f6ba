"""The batch one RL step trains on: rollouts plus the per-row tensors the update needs."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from aha.rollout import Rollouts
from aha.rollout.rollouts import concat_rollouts

# (N,) or (N, T) tensors aligned with the rollouts' rows; None when not used by the run
ROW_FIELDS = ("rewards", "baseline", "step_rewards", "step_ends", "advantages", "old_logprobs", "ref_logprobs",
              "teacher_logprobs", "old_values", "returns", "is_weights", "guided")


@dataclass
class Batch:
    rollouts: Rollouts  # whole groups of group_size consecutive rows
    rewards: torch.Tensor  # (N,) shaped scalar reward of each completion
    baseline: torch.Tensor | None = None  # (N,) ReMax: reward of the prompt's greedy completion
    # (N, T) the part of each reward a process reward model gave step by step, at the tokens that
    # close the steps (the rest of the reward is paid at the last token); None without one
    step_rewards: torch.Tensor | None = None
    # (N, T) 1.0 at the tokens that close a step (a step may be worth exactly 0): which entries of
    # step_rewards are steps, for algorithm.step_advantages; None: the non-zero ones
    step_ends: torch.Tensor | None = None
    advantages: torch.Tensor | None = None  # (N, T)
    old_logprobs: torch.Tensor | None = None  # (N, T) denominator of the importance ratio
    ref_logprobs: torch.Tensor | None = None  # (N, T) reference model, for the KL term
    teacher_logprobs: torch.Tensor | None = None  # (N, T) distillation teacher (algorithm.teacher)
    old_values: torch.Tensor | None = None  # (N, T) critic at rollout time (gae)
    returns: torch.Tensor | None = None  # (N, T) value targets (gae)
    is_weights: torch.Tensor | None = None  # (N, T) truncated importance weights
    guided: torch.Tensor | None = None  # (N,) bool: ExPO's answer-shown retries in place of sampled rows

    def __len__(self) -> int:
        return len(self.rollouts)

    def select(self, rows: torch.Tensor) -> "Batch":
        picked = {name: getattr(self, name)[rows] for name in ROW_FIELDS if getattr(self, name) is not None}
        return replace(self, rollouts=self.rollouts.select(rows), **picked)


def _pad_width(t: torch.Tensor, width: int) -> torch.Tensor:
    return t if t.dim() == 1 or t.shape[1] == width else F.pad(t, (0, width - t.shape[1]))


def concat_batches(parts: list[Batch], pad_id: int) -> Batch:
    """Stack batches row-wise; per-token tensors are zero-padded to the widest completion.
    A field is kept only when every part has it."""
    if len(parts) == 1:
        return parts[0]
    rollouts = concat_rollouts([p.rollouts for p in parts], pad_id)
    width = rollouts.completion_ids.shape[1]
    stacked = {}
    for name in ROW_FIELDS:
        values = [getattr(p, name) for p in parts]
        stacked[name] = None if any(v is None for v in values) else torch.cat([_pad_width(v, width) for v in values])
    return Batch(rollouts=rollouts, **stacked)


def group_rows(groups: torch.Tensor, group_size: int) -> torch.Tensor:
    """Row indices of whole groups: group g holds rows g*G .. g*G + G - 1."""
    return (groups.view(-1, 1) * group_size + torch.arange(group_size)).view(-1)


def with_zero_steps(batches: list[Batch]) -> list[Batch]:
    """Where some rounds' rewards gave steps and others' none, zero step rewards for the others:
    none there, not none at all (concat_batches keeps a field only when every part has it)."""
    if all(b.step_rewards is None for b in batches):
        return batches
    zeros = lambda b: torch.zeros(b.rollouts.completion_mask.shape)
    return [b if b.step_rewards is not None else replace(b, step_rewards=zeros(b), step_ends=zeros(b)) for b in batches]
