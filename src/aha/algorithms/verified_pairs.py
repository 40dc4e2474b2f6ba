"""Pairs for a reward model that keeps learning during RL, labelled by a rule verifier (Cooper:
Hong et al. 2025, "Co-optimizing Policy Model and Reward Model", arXiv 2508.05613).

Cooper trusts a rule verifier where it says "right" (high precision) and trains the reward
model, between policy steps, to score such a completion above a wrong one. Here both come
from one group of the policy's own samples (one prompt): the verifier's right completion that
the reward model scores lowest against its wrong completion that the reward model scores
highest, the pair it orders worst. (Cooper writes its negatives with an assistant model that
turns a right solution into a wrong one; a group of the policy's samples already holds wrong
ones, verified wrong by the same rule, and they are the answers the policy actually gives.)

Everything here is over a step's rows laid out group by group: rows g*G .. g*G+G-1 are the
G completions of group g.
"""

from __future__ import annotations

import torch


def _groups(scores: torch.Tensor, right: torch.Tensor, usable: torch.Tensor, group_size: int):
    """Per group, its usable right rows and usable wrong rows (row indices into the step)."""
    if not (len(scores) == len(right) == len(usable)) or len(scores) % group_size:
        raise ValueError(f"scores, right and usable must have the same length, a multiple of the group size "
                         f"{group_size}; got {len(scores)}, {len(right)}, {len(usable)}")
    right, usable = right.tolist(), usable.tolist()
    for start in range(0, len(right), group_size):
        rows = [i for i in range(start, start + group_size) if usable[i]]
        yield [i for i in rows if right[i]], [i for i in rows if not right[i]]


def verified_pairs(scores: torch.Tensor, right: torch.Tensor, usable: torch.Tensor, group_size: int,
                   limit: int) -> list[tuple[int, int]]:
    """(chosen row, rejected row) pairs for a Bradley-Terry update: one per group that has both
    a usable right row and a usable wrong one, its right row with the lowest score against its
    wrong row with the highest (on a tie, the first such row). At most `limit` pairs, those
    the reward model orders worst first (smallest score(chosen) - score(rejected); groups in
    order on a tie), so a small budget goes where the model is most wrong.

    scores: (N,) the reward model's scores; right: (N,) bool, the verifier's labels; usable:
    (N,) bool, rows the reward model could score (a prompt that fills its max_length cannot)."""
    values = scores.tolist()
    pairs = []
    for good, bad in _groups(scores, right, usable, group_size):
        if good and bad:
            chosen = min(good, key=lambda i: values[i])  # min/max keep the first row of a tie
            rejected = max(bad, key=lambda i: values[i])
            pairs.append((chosen, rejected))
    pairs.sort(key=lambda pair: values[pair[0]] - values[pair[1]])  # a stable sort: group order on a tie
    return pairs[:limit]


def verifier_agreement(scores: torch.Tensor, right: torch.Tensor, usable: torch.Tensor,
                       group_size: int) -> tuple[float, int]:
    """How far the reward model orders a step's samples as the verifier labels them: over every
    (right, wrong) pair of usable rows within a group, the share it scores the right one
    higher (a tie counts half: a constant reward model scores 0.5), and how many such pairs
    there were ((0.0, 0) when no group has both). Within groups because a group is what
    GRPO's advantages compare."""
    values = scores.tolist()
    agree, count = 0.0, 0
    for good, bad in _groups(scores, right, usable, group_size):
        for i in good:
            for j in bad:
                agree += 1.0 if values[i] > values[j] else 0.5 if values[i] == values[j] else 0.0
                count += 1
    return (agree / count if count else 0.0), count
