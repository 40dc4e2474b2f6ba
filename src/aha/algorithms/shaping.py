"""Reward shaping before advantages: length penalties, dithering, per-token rewards, replay priorities."""

import torch

NOISE_KINDS = ("gaussian", "uniform")


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer: int, factor: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025), added to the reward:
    0 up to max_len - buffer tokens, then falling linearly to -factor at max_len.
    Lengths are capped at max_len by generation, so -factor is the floor."""
    if not 0 < buffer <= max_len:
        raise ValueError(f"overlong buffer must be in 1..{max_len} (max_new_tokens), got {buffer}")
    over = (lengths.float() - (max_len - buffer)).clamp(min=0, max=buffer)
    return -factor * over / buffer


def length_cost(lengths: torch.Tensor, max_len: int, coef: float, charged: torch.Tensor) -> torch.Tensor:
    """-coef * length / max_len on the charged completions, 0 on the others, added to the
    reward. Charging only correct answers (the default) keeps a wrong answer made shorter
    from looking better, which would teach the policy to give up early; A-DLP charges all."""
    return -coef * (lengths.float() / max_len) * charged.float()


def adapt_length_coef(coef: float, accuracy: float, target: float, rate: float, max_coef: float) -> float:
    """One step of the adaptive length penalty's controller (A-DLP, Su & Cardie 2025,
    arXiv:2505.18298): coef += rate * (accuracy - target), kept in [0, max_coef]. While
    accuracy is above target the penalty grows; when it drops below, the penalty relaxes,
    so shortening never costs accuracy for long."""
    return min(max(coef + rate * (accuracy - target), 0.0), max_coef)


def dither_rewards(rewards: torch.Tensor, scale: float, kind: str = "gaussian",
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """ReDit (Wei et al. 2025): add zero-mean noise to discrete rewards, so groups whose
    verifier scores tie still give a (noisy, unbiased) gradient and the signal is smoother.
    gaussian: N(0, scale^2); uniform: U(-scale, scale)."""
    if kind == "gaussian":
        noise = torch.randn(rewards.shape, generator=generator) * scale
    elif kind == "uniform":
        noise = (torch.rand(rewards.shape, generator=generator) * 2 - 1) * scale
    else:
        raise ValueError(f"unknown noise kind {kind!r}; choose one of {NOISE_KINDS}")
    return rewards + noise


def outcome_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, T) per-token rewards with each sequence's reward on its last valid token, 0 elsewhere
    (a row with no valid token gets none). A non-finite reward is kept as it is, on a valid
    token, for the advantage estimators to recognise and skip."""
    if rewards.shape != mask.shape[:1]:
        raise ValueError(f"rewards must be (N,) = {tuple(mask.shape[:1])} for a mask {tuple(mask.shape)}, "
                         f"got {tuple(rewards.shape)}")
    token_rewards = torch.zeros_like(mask, dtype=rewards.dtype)
    # the last valid column, whether or not the valid tokens are contiguous (a multi-turn
    # episode's mask has the environment's turns as gaps)
    columns = torch.arange(mask.shape[1]).expand(mask.shape)
    last = torch.where(mask.bool(), columns,
                       -1).amax(dim=1).clamp(min=0) if mask.shape[1] else torch.zeros(len(rewards), dtype=torch.long)
    token_rewards[torch.arange(len(rewards)), last] = torch.where(mask.sum(dim=1) > 0, rewards, 0)
    return token_rewards


def replay_priorities(group_abs_advantages: torch.Tensor, alpha: float = 1.0) -> torch.Tensor:
    """Sampling probabilities of replay groups, proportional to |A|^alpha
    (VL-Rethinker's selective sample replay, Wang et al. 2025); alpha = 0 is uniform."""
    weights = group_abs_advantages.clamp(min=0) ** alpha
    total = weights.sum()
    if total <= 0:
        return torch.full_like(weights, 1.0 / max(len(weights), 1))
    return weights / total
