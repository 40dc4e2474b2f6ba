"""Preference losses: learn from pairs (or single labelled completions) without a reward.

Each function takes per-pair (per-sample) sequence log-probabilities as tensors and returns
per-pair losses, unreduced, so the caller chooses the mean and the masking. Which
log-probabilities a method expects differs, and is part of its definition:

- DPO, cDPO and the Bradley-Terry reward loss: summed over the completion's tokens.
- IPO: the paper's h is a summed log-ratio; TRL feeds length-averaged ones. Pass either;
  the target margin 1/(2*beta) means something different for each.
- SimPO and ORPO: averaged over the completion's tokens (their papers' length normalisation).
- KTO: summed, with a reference point z0 from `kto_reference_point`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _check_pairs(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    first = next(iter(shapes.values()))
    if any(shape != first for shape in shapes.values()) or len(first) != 1:
        raise ValueError(f"expected 1-D tensors of one shape (one value per pair), got {shapes}")


def preference_logits(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
                      ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor) -> torch.Tensor:
    """(log pi(y_w) - log ref(y_w)) - (log pi(y_l) - log ref(y_l)): how much more the policy
    than the reference prefers the chosen completion. beta times this is the DPO margin."""
    _check_pairs(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    return (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)


def _smoothed_logistic(margin: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """-log sigma(m), with a share `label_smoothing` of the pairs' labels assumed flipped."""
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    return -F.logsigmoid(margin) * (1 - label_smoothing) - F.logsigmoid(-margin) * label_smoothing


def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
             ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor, beta: float = 0.1,
             label_smoothing: float = 0.0) -> torch.Tensor:
    """DPO (Rafailov et al. 2023, eq. 7): -log sigma(beta * logits). With label_smoothing = eps
    it is conservative DPO (cDPO, Mitchell 2023): each label is taken as right with
    probability 1 - eps."""
    logits = preference_logits(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    return _smoothed_logistic(beta * logits, label_smoothing)


def ipo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
             ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor, beta: float = 0.1) -> torch.Tensor:
    """IPO (Azar et al. 2023, eq. 17): (logits - 1/(2 beta))^2, a squared loss that holds the
    log-ratio margin at 1/(2 beta) instead of pushing it to infinity on deterministic labels."""
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    logits = preference_logits(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    return (logits - 1 / (2 * beta)) ** 2


def simpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor, beta: float = 2.0,
               gamma: float = 0.5, label_smoothing: float = 0.0) -> torch.Tensor:
    """SimPO (Meng et al. 2024, eq. 6): -log sigma(beta * avg log pi(y_w) - beta * avg log pi(y_l)
    - gamma). No reference model; log-probs are averaged over each completion's tokens and
    gamma is the target reward margin."""
    _check_pairs(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps)
    return _smoothed_logistic(beta * (policy_chosen_logps - policy_rejected_logps) - gamma, label_smoothing)


def _log1m_exp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, accurate near 0 and far below it (Maechler 2012)."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def orpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
              chosen_nll: torch.Tensor, beta: float = 0.1) -> torch.Tensor:
    """ORPO (Hong et al. 2024, eq. 6-7): the chosen completion's NLL plus
    -beta * log sigma(log odds(y_w) - log odds(y_l)), where odds(y) = P(y) / (1 - P(y)) with
    P(y) the per-token-averaged probability (exp of the averaged log-prob, which must be < 0).
    No reference model. chosen_nll is the SFT loss on the chosen completion, per pair."""
    _check_pairs(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 chosen_nll=chosen_nll)
    if bool((policy_chosen_logps >= 0).any() | (policy_rejected_logps >= 0).any()):
        raise ValueError("orpo_loss needs average log-probs < 0 (a probability of 1 has infinite odds)")
    log_odds = (policy_chosen_logps - policy_rejected_logps) - (
        _log1m_exp(policy_chosen_logps) - _log1m_exp(policy_rejected_logps))
    return chosen_nll - beta * F.logsigmoid(log_odds)


def kto_reference_point(policy_logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """KTO's z0 (Ethayarajh et al. 2024): the policy's KL to the reference, estimated as the
    mean log-ratio over completions that do not belong to their prompts (TRL pairs each
    prompt with another sample's completion), clamped at 0 and not differentiated."""
    return (policy_logps - ref_logps).mean().clamp(min=0).detach()


def kto_loss(policy_logps: torch.Tensor, ref_logps: torch.Tensor, desirable: torch.Tensor,
             reference_point: torch.Tensor | float, beta: float = 0.1, desirable_weight: float = 1.0,
             undesirable_weight: float = 1.0) -> torch.Tensor:
    """KTO (Ethayarajh et al. 2024, eq. 8): for each completion with a binary label, with
    r = log pi(y) - log ref(y) and z0 the reference point,
    desirable:   lambda_D * (1 - sigma(beta * (r - z0)))
    undesirable: lambda_U * (1 - sigma(beta * (z0 - r)))."""
    _check_pairs(policy_logps=policy_logps, ref_logps=ref_logps, desirable=desirable)
    if desirable.dtype != torch.bool:
        raise ValueError(f"desirable must be a bool tensor, got {desirable.dtype}")
    log_ratio = policy_logps - ref_logps
    z0 = torch.as_tensor(reference_point, dtype=log_ratio.dtype)
    liked = desirable_weight * (1 - torch.sigmoid(beta * (log_ratio - z0)))
    disliked = undesirable_weight * (1 - torch.sigmoid(beta * (z0 - log_ratio)))
    return torch.where(desirable, liked, disliked)


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor,
                       margin: torch.Tensor | float = 0.0) -> torch.Tensor:
    """A reward model's pairwise loss (Bradley-Terry): -log sigma(r_w - r_l - margin). A
    margin per pair (Llama 2's preference strength) asks the gap to be at least that large."""
    _check_pairs(chosen_rewards=chosen_rewards, rejected_rewards=rejected_rewards)
    return -F.logsigmoid(chosen_rewards - rejected_rewards - margin)
