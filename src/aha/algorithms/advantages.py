"""Group-relative advantages (GRPO and its unscaled variant)."""

import torch

SCALES = ("std", "none")


def grpo_advantages(rewards: torch.Tensor, scale: str = "std", eps: float = 1e-6) -> torch.Tensor:
    """Advantages of G samples per prompt relative to their own group.

    rewards: (num_prompts, group_size) scalar reward of each completion.
    scale="std":  (r - mean) / (std + eps), GRPO (Shao et al. 2024). std is the unbiased
                  (Bessel-corrected) group std, as in TRL and verl.
    scale="none": r - mean, Dr. GRPO (Liu et al. 2025): no division, so easy and hard
                  prompts are not re-weighted by their reward spread.
    A group whose rewards are all equal gets zero advantage under both.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (num_prompts, group_size), got shape {tuple(rewards.shape)}")
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; choose one of {SCALES}")
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if scale == "none":
        return centered
    if rewards.shape[1] < 2:
        raise ValueError("scale='std' needs group_size >= 2")
    return centered / (rewards.std(dim=1, keepdim=True) + eps)


def zero_variance_groups(rewards: torch.Tensor) -> torch.Tensor:
    """(num_prompts,) bool: groups whose samples all got the same reward.

    Their advantages are all zero, so they carry no policy gradient (DAPO's dynamic sampling
    drops them rather than diluting the token mean with them)."""
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) == 0
