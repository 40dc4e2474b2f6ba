"""Guidance for prompts the policy never solves (ExPO: Zhou et al. 2025, *Self-Explanation
Policy Optimization*, arXiv 2507.02834).

A group whose G completions are all wrong has zero advantage everywhere: GRPO learns nothing
from the prompts it most needs. ExPO asks the policy again with the reference answer shown
and uses what it writes (a "self-explanation": likely under the policy, and ending in the
right answer) as a positive sample of the prompt without the answer. These are the pieces
that decide which groups are guided, which row the guided completion takes, and how much it
may weigh; the sampling and wiring live in aha.training.rl.guidance.
"""

from __future__ import annotations

import torch


def first_passing(passed: list[bool], tries: int) -> list[int | None]:
    """For each block of `tries` consecutive retries (one block per guided group), the index
    of its first passing retry, or None when none passed."""
    if tries < 1 or len(passed) % tries:
        raise ValueError(f"{len(passed)} retries do not make whole blocks of {tries}")
    picks = []
    for start in range(0, len(passed), tries):
        hits = [row for row in range(start, start + tries) if passed[row]]
        picks.append(hits[0] if hits else None)
    return picks


def guided_row(group: int, group_size: int) -> int:
    """The row a guided completion replaces: its group's last. Every row of an unsolved group
    is wrong, so which one goes changes nothing but the order; the last keeps the sampled
    completions first, where the per-group examples are read from."""
    return group * group_size + group_size - 1


def placement(n_rows: int, group_size: int, groups: list[int]) -> list[int]:
    """The row order that puts guided completion k (appended after the n_rows sampled ones,
    at n_rows + k) in place of guided_row(groups[k]): an index for Rollouts.select on the
    sampled rows followed by the guided ones. The replaced rows drop out."""
    order = list(range(n_rows))
    for k, group in enumerate(groups):
        row = guided_row(group, group_size)
        if not 0 <= row < n_rows:
            raise ValueError(f"group {group} is outside {n_rows} rows of groups of {group_size}")
        order[row] = n_rows + k
    return order


def cap_guided_advantages(advantages: torch.Tensor, guided: torch.Tensor, cap: float) -> torch.Tensor:
    """(N, T) advantages with a guided row's clamped at `cap` from above (sampled rows keep
    theirs). With advantage_scale=std one right completion among G-1 wrong ones gets
    sqrt(G-1) (2.65 for G = 8): an off-policy sample would then outweigh the policy's own
    group several times over. The cap bounds only the push up: a negative value is left."""
    rows = guided.bool().view(-1, 1)
    return torch.where(rows, advantages.clamp(max=cap), advantages)
