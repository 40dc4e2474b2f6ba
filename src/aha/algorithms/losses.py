"""Per-token policy losses, KL estimators and their aggregation."""

import torch


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate, per token, as a loss to minimise.

    loss = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A), ratio = exp(logp - old).
    Separate low and high clip ranges follow DAPO's clip-higher (e.g. 0.2 / 0.28).
    advantages broadcast against logprobs: pass (N, 1) for one advantage per sequence.
    Returns (loss, clipped) where clipped marks tokens whose gradient the clip removed.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    clipped = clipped_ratio * advantages
    loss = -torch.minimum(unclipped, clipped)
    return loss, (clipped < unclipped)


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token KL(policy || reference) by Schulman's k3 estimator (unbiased, always >= 0).

    With log r = ref - logp: k3 = exp(log r) - log r - 1, sampled from the policy."""
    log_ratio = ref_logprobs - logprobs
    return torch.exp(log_ratio) - log_ratio - 1.0


def token_mean(values: torch.Tensor, mask: torch.Tensor, num_tokens: float | None = None) -> torch.Tensor:
    """Sum over valid tokens divided by the token count (DAPO's token-level aggregation).

    Pass num_tokens = the count over the whole batch when the batch is split into
    micro-batches, so that the accumulated gradient equals the full-batch one."""
    total = mask.sum() if num_tokens is None else num_tokens
    return (values * mask).sum() / max(float(total), 1.0)
