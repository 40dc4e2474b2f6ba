"""Importance weights for the engine-vs-trainer mismatch: the rollout engine samples from
pi_engine (its kernels, its precision) while the update's ratio is taken against the trainer's
pi_old, so every token's loss is reweighted by pi_old / pi_engine.

One function covers the published variants, by two choices:
- level: the ratio per token (TIS, Yao et al. 2025; IcePop) or one per sequence, the product
  of its tokens' ratios (sequence-level IS: unbiased for the sequence's probability, higher
  variance; Liu, Li et al. 2025, "When Speed Kills Stability").
- mode: outside the band [low, cap], truncate the weight to the band's edge (TIS), or mask
  the token (weight 0; inside the band the weight is the ratio itself): masked importance
  sampling (MIS) per sequence, IcePop (Ling Team 2025, Ring-1T) per token.
truncated_is_weights (aha.algorithms.losses) is the case token / truncate / low 0.

The weights are detached (they change the measure, not the objective) and scale the policy
loss only: a masked token still counts in the loss's normaliser, as in the IcePop and TIS
reference implementations, so masking one token does not enlarge the others' share."""

import torch

from aha.algorithms.losses import LOG_RATIO_CLAMP, _check_like, clamped_log_ratio

IS_LEVELS = ("token", "sequence")
IS_MODES = ("truncate", "mask")


def importance_log_ratio(trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor,
                         level: str = "token") -> torch.Tensor:
    """(N, T) log(pi_trainer / pi_engine) per token, or (level=sequence) the sum over a row's
    valid tokens broadcast to all of them; clamped to +-LOG_RATIO_CLAMP (after the sum), so
    its exp is finite. Padding is selected away, so a NaN there changes nothing."""
    _check_like("engine_logprobs", engine_logprobs, trainer_logprobs)
    _check_like("mask", mask, trainer_logprobs)
    if level == "token":
        return clamped_log_ratio(trainer_logprobs, engine_logprobs)
    if level == "sequence":
        per_token = torch.where(mask.bool(), trainer_logprobs - engine_logprobs, 0)
        total = torch.clamp(per_token.sum(dim=1, keepdim=True), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return total.expand_as(trainer_logprobs).clone()
    raise ValueError(f"unknown importance-sampling level {level!r}; choose one of {IS_LEVELS}")


def importance_weights(trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, mask: torch.Tensor,
                       cap: float, low: float = 0.0, level: str = "token",
                       mode: str = "truncate") -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, outside): detached (N, T) weights and the bool mask of valid tokens whose
    ratio rho (see importance_log_ratio) lay outside [low, cap].

    truncate: weight = clamp(rho, low, cap)            (token: TIS; sequence: Seq-TIS)
    mask:     weight = rho inside [low, cap], else 0   (sequence: Seq-MIS; token with low > 0: IcePop)"""
    if not 0 <= low < cap:
        raise ValueError(f"the importance-weight band needs 0 <= low < cap, got low={low}, cap={cap}")
    if mode not in IS_MODES:
        raise ValueError(f"unknown importance-sampling mode {mode!r}; choose one of {IS_MODES}")
    ratio = torch.exp(importance_log_ratio(trainer_logprobs, engine_logprobs, mask, level)).detach()
    outside = (ratio < low) | (ratio > cap)
    if mode == "truncate":
        weights = torch.clamp(ratio, min=low, max=cap)
    else:
        weights = torch.where(outside, 0.0, ratio)
    return weights, outside & mask.bool()


def outside_fractions(outside: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(share of valid tokens outside the band, share of sequences with a valid token that have
    at least one such token); 0 for an empty batch."""
    valid = mask.bool()
    tokens = float(outside[valid].float().mean()) if valid.any() else 0.0
    rows = valid.any(dim=1)
    seqs = float((outside & valid).any(dim=1)[rows].float().mean()) if rows.any() else 0.0
    return tokens, seqs
