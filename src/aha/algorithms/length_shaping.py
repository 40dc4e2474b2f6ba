"""Length shaping that depends on the prompt: LASER-D's target length per difficulty bucket
(Liu et al. 2025, arXiv:2505.15612) and A-DLP's coefficient kept per prompt (Su & Cardie 2025,
arXiv:2505.18298).

A prompt's difficulty is its group's pass rate: right answers out of group_size. LASER-D puts
each group in one of three buckets and pays a bonus to a right answer no longer than its
bucket's target; each target follows the lengths the policy writes in that bucket, by the
paper's "expected correct responses" rule (ecr_target)."""

from __future__ import annotations

import torch

from aha.algorithms.shaping import adapt_length_coef

BUCKETS = ("easy", "medium", "hard")  # bucket index 0, 1, 2


def difficulty_buckets(right: torch.Tensor, group_size: int) -> torch.Tensor:
    """(P,) bucket of each group from its count of right answers: 0 easy (pass rate >= 2/3),
    1 medium (>= 1/3), 2 hard (below). In integers (3 * right >= 2 * G), so a pass rate of
    exactly 2/3 is easy whatever float rounding would say."""
    right = right.long()
    return torch.where(3 * right >= 2 * group_size, 0, torch.where(3 * right >= group_size, 1, 2))


def fewest_right(bucket: int, group_size: int) -> int:
    """The fewest right answers a group of the bucket has: ceil(2G/3) easy, ceil(G/3) medium,
    and 1 hard (a hard group may have none; the paper counts one, so its target is the
    longest length seen and hard prompts keep their room to think)."""
    if bucket == 2:
        return 1
    thirds = 2 if bucket == 0 else 1
    return -(-thirds * group_size // 3)  # ceil(thirds * G / 3), in integers


def ecr_target(lengths: torch.Tensor, fewest: int, expected: int, max_len: int) -> int:
    """LASER-D's target for one bucket: the shortest length l at which a group of the bucket
    expects `expected` right answers within l, ECR(l) = coverage(l) * fewest >= expected,
    where coverage(l) is the share of the bucket's completions no longer than l (all of them,
    right or wrong, as in the authors' code). Exactly the ceil(expected * n / fewest)-th
    shortest length; max_len (no limit) when even full coverage expects too few."""
    n = lengths.numel()
    need = -(-expected * n // fewest)  # completions that must be within l
    if n == 0 or need > n:
        return max_len
    return int(lengths.flatten().sort().values[need - 1])


def laser_d_targets(right: torch.Tensor, lengths: torch.Tensor, previous: list[int], expected: int,
                    max_len: int) -> list[int]:
    """The three buckets' targets after a step whose groups had `right` answers (P,) and
    completion lengths (P, G): each bucket's ecr_target over its groups' completions; a
    bucket with no group this step keeps its previous target."""
    group_size = lengths.shape[1]
    buckets = difficulty_buckets(right, group_size)
    targets = list(previous)
    for b in range(len(BUCKETS)):
        rows = lengths[buckets == b]
        if rows.numel():
            targets[b] = ecr_target(rows, fewest_right(b, group_size), expected, max_len)
    return targets


def row_targets(correct: torch.Tensor, targets: list[int]) -> torch.Tensor:
    """(P * G,) each completion's target: its group's bucket's. correct: (P, G) bool."""
    buckets = difficulty_buckets(correct.sum(dim=1), correct.shape[1])
    return torch.tensor(targets)[buckets].repeat_interleave(correct.shape[1])


def laser_bonus(correct: torch.Tensor, lengths: torch.Tensor, targets: torch.Tensor, bonus: float) -> torch.Tensor:
    """LASER's step reward, added to the reward: bonus for a right answer no longer than its
    target, 0 otherwise. A wrong answer earns nothing for being short (it would teach the
    policy to give up early)."""
    return bonus * (correct & (lengths <= targets)).float()


def adapt_prompt_coefs(coefs: dict[str, float], ids: list[str], right: list[int], group_size: int, start: float,
                       target: float, rate: float, max_coef: float) -> dict[str, float]:
    """A-DLP per prompt: each prompt's coefficient takes one adapt_length_coef step on its own
    group's accuracy (right / group_size); a prompt first seen starts at `start`. A prompt
    with several groups takes one step per group, in order."""
    out = dict(coefs)
    for prompt, count in zip(ids, right):
        out[prompt] = adapt_length_coef(out.get(prompt, start), count / group_size, target, rate, max_coef)
    return out
