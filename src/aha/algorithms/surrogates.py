"""Policy losses that reshape PPO's trust region rather than clip each token's ratio hard:
SAPO's smooth gate and GMPO's geometric mean. Same contract as aha.algorithms.losses: a
per-token loss to minimise, shaped like logprobs, and a bool mask of the tokens whose gradient
the loss removed or cut down (logged as policy/clip_frac)."""

import torch

from aha.algorithms.losses import _check_advantages, _check_like, clamped_log_ratio

# SAPO's gate multiplies a token's gradient by 4 s (1 - s), s = sigmoid(tau (r - 1)): 1 at
# r = 1, decaying smoothly away from it. A token counts as clipped once that factor is below
# this, i.e. |r - 1| > 1.76 / tau: the gate has taken more than half its gradient.
SAPO_DAMPED_BELOW = 0.5


def sapo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              tau_pos: float = 1.0, tau_neg: float = 1.05) -> tuple[torch.Tensor, torch.Tensor]:
    """SAPO (Gao et al. 2025, Qwen, *Soft Adaptive Policy Optimization*, arXiv:2511.20347):
    loss = -f(r) * A with the gate f(r) = (4 / tau) * sigmoid(tau * (r - 1)), r = exp(logp - old),
    tau = tau_pos where A > 0 and tau_neg elsewhere.

    Why a gate instead of a clip: its gradient, 4 s (1 - s) * r * A * grad logp with
    s = sigmoid(tau (r - 1)), equals the policy gradient at r = 1 and fades smoothly as r leaves
    1, so an off-policy token is damped rather than cut off at a cliff. A larger tau_neg damps
    negative-advantage tokens faster: pushing many tokens' probability down is what
    destabilises training (the paper's asymmetry). The value at r = 1 is -2A / tau, not -A:
    the loss is defined by its gradient. The paper averages per sequence
    (loss_agg=seq_mean_token_mean). clipped marks tokens whose gradient the gate more than halved.
    The log-ratio is clamped to +-LOG_RATIO_CLAMP before exp; far out the gate saturates and the
    gradient is exactly 0, never NaN."""
    _check_like("old_logprobs", old_logprobs, logprobs)
    _check_advantages(advantages, logprobs)
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"SAPO temperatures must be > 0, got tau_pos={tau_pos}, tau_neg={tau_neg}")
    ratio = torch.exp(clamped_log_ratio(logprobs, old_logprobs))
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0))
    loss = -(4.0 / tau) * gate * advantages
    damping = 4.0 * gate.detach() * (1.0 - gate.detach())
    return loss, damping < SAPO_DAMPED_BELOW


def gmpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              clip_low: float = 0.4, clip_high: float = 0.4) -> tuple[torch.Tensor, torch.Tensor]:
    """GMPO (Zhao et al. 2025, *Geometric-Mean Policy Optimization*, arXiv:2507.20673): each
    sequence's objective is A times the geometric mean of its token ratios,
    G = exp(mean_t clip(log r_t)), instead of the arithmetic mean of r_t * A.

    Why: one token with an outlier ratio moves an arithmetic mean (GRPO) a lot and a geometric
    mean little, so updates stay in a narrower ratio range. The clip is in log space, per
    token and pessimistic as PPO's: log r_t is capped above at clip_high where A > 0 and below
    at -clip_low where A < 0 (the paper: 0.4 both, i.e. ratios in [e^-0.4, e^0.4]); a clipped
    token drops out of the gradient. Every token of sequence i carries loss -A_t * G_i, so with
    loss_agg=seq_mean_token_mean the loss is mean_i(-mean_t(A_t) * G_i), the paper's, and its
    gradient -A_i G_i (1/|y_i|) sum_t grad log r_t over unclipped tokens. Padding (mask 0) is
    selected away; a row without valid tokens has G = 1."""
    _check_like("old_logprobs", old_logprobs, logprobs)
    _check_like("mask", mask, logprobs)
    _check_advantages(advantages, logprobs)
    log_ratio = clamped_log_ratio(logprobs, old_logprobs)
    sign = torch.sign(advantages)
    bounded = torch.clamp(log_ratio, -clip_low, clip_high)
    # sign * min(sign * l, sign * clip(l)): min(l, clip(l)) for A > 0, max(l, clip(l)) for A < 0
    kept = sign * torch.minimum(sign * log_ratio, sign * bounded)
    valid = mask.bool()
    mean_log = torch.where(valid, kept, 0).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)
    loss = (-advantages * torch.exp(mean_log)).expand_as(logprobs)
    clipped = (sign * bounded < sign * log_ratio) & valid
    return loss, clipped
