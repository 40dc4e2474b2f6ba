"""Step rewards (a process reward model's score per step): transforms that stop a policy from
earning more by writing more steps, and group-relative advantages computed step by step.

Why transforms: paid as they are, step rewards in (0, 1) add up, so every extra step pays
(the sum form that Gao et al. 2024 and PURE, Cheng et al. 2025, show being hacked). Each
transform below bounds what a completion can collect however many steps it writes.

Why step-level group advantages: a group-relative estimator given only a completion's summed
step rewards cannot tell its good steps from its bad ones; normalising each step's reward
within the group and paying every token the normalised rewards of its step and the steps
after it keeps that credit (DeepSeekMath's process supervision, PRIME's RLOO over steps).
"""

import torch

STEP_TRANSFORMS = ("none", "clip", "delta", "clip_delta", "min_form")


def transform_step_rewards(values: torch.Tensor, transform: str, threshold: float = 0.5,
                           temperature: float = 0.1) -> torch.Tensor:
    """One completion's step rewards r_1..r_K (a 1-D tensor) after a transform:

    none:       r_k.
    clip:       min(r_k - threshold, 0) (Gao et al. 2024, *On Designing Effective RL Reward at
                Training Time for LLM Reasoning*, arXiv:2410.15115, the Clip mechanism): no step
                earns more than 0, so a step added is never paid and a step below the threshold costs.
    delta:      r_k - r_{k+1} for k < K, and r_K for the last step (the same paper's Delta
                mechanism): the rewards from step k on sum to r_k, so the whole completion
                collects r_1, whatever it adds after.
    clip_delta: delta of the clipped rewards (the paper's combination).
    min_form:   w_k * r_k with w = softmax(-r / temperature) over the completion's steps (PURE,
                Cheng et al. 2025, arXiv:2504.15275, as its code does it with temperature 0.1):
                the rewards sum to a soft minimum, and as temperature -> 0 the worst step takes
                all the weight, so the return from step k is about the completion's worst step
                while that step is still ahead, and about 0 after it (what PURE's code pays; the
                paper writes the value as the minimum over the later steps).
    No step: an empty tensor back."""
    if transform not in STEP_TRANSFORMS:
        raise ValueError(f"unknown step transform {transform!r}; choose one of {STEP_TRANSFORMS}")
    if values.dim() != 1:
        raise ValueError(f"step rewards must be one completion's (K,) values, got shape {tuple(values.shape)}")
    if transform in ("clip", "clip_delta"):
        values = torch.clamp(values - threshold, max=0.0)
    if transform in ("delta", "clip_delta"):
        values = values - torch.cat([values[1:], values.new_zeros(min(1, len(values)))])
    if transform == "min_form":
        if temperature <= 0:
            raise ValueError(f"min_form needs temperature > 0, got {temperature}")
        values = torch.softmax(-values / temperature, dim=0) * values
    return values


def _group_stats(values: torch.Tensor, counted: torch.Tensor, group_size: int) -> tuple[torch.Tensor, ...]:
    """Per group of group_size rows: (count, mean, unbiased std, all equal) of the counted
    entries of values, each shaped (groups, 1, 1)."""
    grouped, taken = values.view(-1, group_size, values.shape[1]), counted.view(-1, group_size, values.shape[1])
    count = taken.sum(dim=(1, 2), keepdim=True)
    mean = torch.where(taken, grouped, 0).sum(dim=(1, 2), keepdim=True) / count.clamp(min=1)
    centered = torch.where(taken, grouped - mean, 0)
    std = torch.sqrt((centered**2).sum(dim=(1, 2), keepdim=True) / (count - 1).clamp(min=1))
    hi = torch.where(taken, grouped, float("-inf")).amax(dim=(1, 2), keepdim=True)
    lo = torch.where(taken, grouped, float("inf")).amin(dim=(1, 2), keepdim=True)
    return count, mean, std, (hi == lo) | (count == 0)


def flat_step_groups(step_rewards: torch.Tensor, step_ends: torch.Tensor, group_size: int) -> torch.Tensor:
    """(groups,) True where a group's steps (the entries of step_rewards where step_ends is set)
    are all worth the same, or it has none: step_group_advantages gives it exactly 0."""
    taken = step_ends.bool().view(-1, group_size * step_ends.shape[1])
    values = step_rewards.view(taken.shape)
    hi = torch.where(taken, values, float("-inf")).amax(dim=1)
    lo = torch.where(taken, values, float("inf")).amin(dim=1)
    return (hi == lo) | ~taken.any(dim=1)


def step_group_advantages(step_rewards: torch.Tensor, step_ends: torch.Tensor, mask: torch.Tensor, group_size: int,
                          baseline: str = "mean", scale: str = "std", rows: torch.Tensor | None = None,
                          eps: float = 1e-6) -> torch.Tensor:
    """Token advantages from step rewards, each step judged against the steps of its group.

    step_rewards: (N, T) each step's reward on the token that closes it; step_ends: (N, T) 1
    where a step closes (a step can be worth exactly 0); mask: (N, T) valid tokens; rows of a
    group are group_size consecutive rows; rows: (N,) bool, the rows that take part (a row whose
    reward is not finite gets 0 and counts in no statistic).

    baseline="mean" (DeepSeekMath, Shao et al. 2024, arXiv:2402.03300, sec. 4.1.3, process
    supervision): r~ = (r - mean(R)) / std(R) over the set R of every step reward of the group
    (std unbiased, as grpo_advantages; scale="none" only centres, as Dr. GRPO).
    baseline="loo" (PRIME, Cui et al. 2025, arXiv:2502.01456, eq. 5): r~_{i,k} = r_{i,k} - mean
    over the group's other completions j (those with a step) of m_j, the mean step reward of j.
    (verl's PRIME recipe computes r * G/(G-1) - sum_j m_j/(G-1), which differs from this by
    (r - m_i)/(G-1).)
    Then A_{i,t} = sum of r~_{i,k} over the steps k of row i that close at or after token t:
    the advantage of a token is the normalised reward of its own step and of the steps after it.
    A group whose counted step rewards are all equal (or that has none) gets exactly 0."""
    if baseline not in ("mean", "loo") or scale not in ("std", "none"):
        raise ValueError(f"baseline must be mean or loo and scale std or none, got {baseline!r}, {scale!r}")
    if step_rewards.shape != step_ends.shape or step_rewards.shape != mask.shape:
        raise ValueError(f"step_rewards, step_ends and mask must have one shape, got {tuple(step_rewards.shape)}, "
                         f"{tuple(step_ends.shape)} and {tuple(mask.shape)}")
    if step_rewards.shape[0] % group_size:
        raise ValueError(f"{step_rewards.shape[0]} rows do not make whole groups of {group_size}")
    N, T = step_rewards.shape
    rows = torch.ones(N, dtype=torch.bool) if rows is None else rows
    counted = step_ends.bool() & mask.bool() & rows.unsqueeze(1)
    count, mean, std, flat = _group_stats(step_rewards, counted, group_size)
    grouped = step_rewards.view(-1, group_size, T)
    if baseline == "mean":
        normed = grouped - mean
        if scale == "std":
            normed = torch.where(count > 1, normed / (std + eps), 0)
    else:
        taken = counted.view(-1, group_size, T)
        steps = taken.sum(dim=2, keepdim=True)  # (groups, G, 1) steps of each row
        row_mean = torch.where(taken, grouped, 0).sum(dim=2, keepdim=True) / steps.clamp(min=1)
        has = steps > 0
        others = has.sum(dim=1, keepdim=True) - has.to(steps.dtype)  # the other rows with a step
        others_sum = torch.where(has, row_mean, 0).sum(dim=1, keepdim=True) - torch.where(has, row_mean, 0)
        normed = torch.where(others > 0, grouped - others_sum / others.clamp(min=1), 0)
    normed = torch.where(counted.view(-1, group_size, T) & ~flat, normed, 0).view(N, T)
    # the sum over the steps closing at or after t: a reverse cumulative sum along the tokens
    return torch.where(mask.bool() & rows.unsqueeze(1), normed.flip(1).cumsum(1).flip(1), 0)
