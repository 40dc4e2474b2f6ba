"""Preference losses: learn from pairs (or single labelled completions) without a reward.

Each function takes per-pair (per-sample) sequence log-probabilities as tensors and returns
per-pair losses, unreduced, so the caller chooses the mean and the masking. Which
log-probabilities a method expects differs, and is part of its definition:

- DPO, cDPO and the Bradley-Terry reward loss: summed over the completion's tokens.
- IPO: the paper's h is a summed log-ratio; TRL feeds length-averaged ones. Pass either;
  the target margin 1/(2*beta) means something different for each.
- SimPO and ORPO: averaged over the completion's tokens (their papers' length normalisation).
- KTO: summed, with a reference point z0 from `kto_reference_point`.
- TDPO, the hinge loss, BCO pairs and DPO with an offset (ODPO): summed, as DPO.
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
             label_smoothing: float = 0.0, offset: torch.Tensor | float = 0.0) -> torch.Tensor:
    """DPO (Rafailov et al. 2023, eq. 7): -log sigma(beta * logits). With label_smoothing = eps
    it is conservative DPO (cDPO, Mitchell 2023): each label is taken as right with
    probability 1 - eps. An offset per pair (ODPO, Amini et al. 2024) asks the
    implicit reward margin beta * logits to exceed it: -log sigma(beta * logits - offset),
    so a pair preferred strongly is pushed further apart than a near tie."""
    logits = preference_logits(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    return _smoothed_logistic(beta * logits - offset, label_smoothing)


def reward_offset(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor, alpha: float = 1.0,
                  scale: str = "log") -> torch.Tensor:
    """ODPO's offset (Amini et al. 2024) from the gap in a reward's scores of the
    pair's two completions: alpha * log(gap) (the paper's default; a gap under 1 gives a
    negative offset, a weak preference asks for less than plain DPO) or alpha * gap
    ("linear"). A gap that is not finite (a sample whose reward failed, ranked last but with
    no score) gives 0: the pair is kept as plain DPO, its strength unknown."""
    _check_pairs(chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    gap = chosen_scores - rejected_scores
    finite = torch.isfinite(gap)
    if bool((gap[finite] <= 0).any()):
        raise ValueError("reward_offset needs every chosen score above its rejected score")
    safe = torch.where(finite, gap, torch.ones_like(gap))
    if scale == "log":
        scaled = torch.log(safe)
    elif scale == "linear":
        scaled = safe
    else:
        raise ValueError(f"scale must be 'log' or 'linear', got {scale!r}")
    return torch.where(finite, alpha * scaled, torch.zeros_like(gap))


def hinge_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
               ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor, beta: float = 0.1) -> torch.Tensor:
    """The hinge loss of SLiC-HF (Zhao et al. 2023) on reference-normalised likelihoods, as RSO
    (Liu et al. 2024, "hinge-norm") and TRL's loss_type="hinge" use it:
    max(0, 1 - beta * logits). Pairs already apart by 1/beta give no gradient at all (DPO's
    sigmoid never stops pushing)."""
    logits = preference_logits(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    return torch.relu(1 - beta * logits)


def bco_pair_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
                  ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor, beta: float = 0.1,
                  delta: torch.Tensor | float = 0.0) -> torch.Tensor:
    """BCO on pairs (Jung et al. 2024): a binary classifier whose logit is the
    implicit reward r = beta * log(pi / ref) minus a reward shift delta, trained to call
    the chosen completion good and the rejected one bad, each on its own:
    -log sigma(r_w - delta) - log sigma(-(r_l - delta)). Unlike DPO, a pair whose two
    rewards move up together is not a pair learned: each completion is judged against delta."""
    _check_pairs(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                 ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    chosen = beta * (policy_chosen_logps - ref_chosen_logps)
    rejected = beta * (policy_rejected_logps - ref_rejected_logps)
    return -F.logsigmoid(chosen - delta) - F.logsigmoid(-(rejected - delta))


def token_kl(ref_logprobs: torch.Tensor, policy_logprobs: torch.Tensor) -> torch.Tensor:
    """KL(ref || pi) at each position from the two log-softmaxed distributions over the whole
    vocabulary (the last dimension): sum_v ref(v) * (log ref(v) - log pi(v)). TDPO's
    per-token term. The expectation is under the reference, which gets no gradient; a token
    the reference never emits (log-prob -inf) adds 0, not 0 * inf."""
    if ref_logprobs.shape != policy_logprobs.shape:
        raise ValueError(f"ref_logprobs {tuple(ref_logprobs.shape)} and policy_logprobs "
                         f"{tuple(policy_logprobs.shape)} differ")
    ref_logprobs = ref_logprobs.detach()
    ref_probs = ref_logprobs.exp()
    return torch.where(ref_probs > 0, ref_probs * (ref_logprobs - policy_logprobs), 0.0).sum(dim=-1)


def tdpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
              ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor, chosen_kl: torch.Tensor,
              rejected_kl: torch.Tensor, beta: float = 0.1, alpha: float = 0.5, version: int = 2) -> torch.Tensor:
    """Token-level DPO (Zeng et al. 2024). chosen_kl / rejected_kl are each
    completion's sequential KL, sum over its tokens of KL(ref || pi) at that position
    (`token_kl`). With u = beta * logits (DPO's margin):
    TDPO1: -log sigma(u - beta * (kl_l - kl_w));
    TDPO2: -log sigma(u - alpha * beta * (kl_l - sg(kl_w))), the chosen completion's KL
    without gradient, so the term only pulls the rejected completion's distributions back
    to the reference (the paper's recommended form, alpha = 0.5)."""
    _check_pairs(chosen_kl=chosen_kl, rejected_kl=rejected_kl, policy_chosen_logps=policy_chosen_logps)
    logits = preference_logits(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps)
    if version == 1:
        delta = rejected_kl - chosen_kl
    elif version == 2:
        delta = alpha * (rejected_kl - chosen_kl.detach())
    else:
        raise ValueError(f"version must be 1 or 2, got {version}")
    return -F.logsigmoid(beta * (logits - delta))


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
