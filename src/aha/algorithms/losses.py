"""Per-token policy losses, KL estimators, entropy, value loss and loss aggregation.

Every policy loss returns (loss, clipped): a per-token loss to minimise, shaped like
logprobs, and a bool mask of the tokens whose gradient the clip removed or capped.
Advantages broadcast against logprobs: (N, 1) for one per sequence, (N, T) per token; any
other shape is a ValueError (an (N,) vector would silently broadcast along T when N == T).

Every log-ratio (policy vs old, reference vs policy, trainer vs engine) is clamped to
[-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP] before exp, as verl and OpenRLHF do: exp(89) overflows
float32, and one overflowed token would make the loss and every gradient inf or NaN.
The clamp passes no gradient beyond it; inside it changes nothing.
"""

from dataclasses import dataclass

import torch

AGGREGATIONS = ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant")
KL_ESTIMATORS = ("k1", "k2", "k3")
LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 4.9e8: far beyond any clip range, far below overflow


def _check_like(name: str, tensor: torch.Tensor, logprobs: torch.Tensor) -> None:
    if tensor.shape != logprobs.shape:
        raise ValueError(f"{name} must have the shape of logprobs {tuple(logprobs.shape)}, got {tuple(tensor.shape)}")


def _check_advantages(advantages: torch.Tensor, logprobs: torch.Tensor) -> None:
    """advantages: logprobs' shape, or size 1 along the token dims ((N, 1) for (N, T))."""
    ok = advantages.dim() == logprobs.dim() and advantages.shape[:1] == logprobs.shape[:1] and all(
        a in (1, b) for a, b in zip(advantages.shape[1:], logprobs.shape[1:]))
    if not ok:
        expected = (tuple(logprobs.shape[:1]) + (1,) * (logprobs.dim() - 1)) if logprobs.dim() > 1 else None
        alt = f" or {expected}" if expected else ""
        raise ValueError(f"advantages must be shaped {tuple(logprobs.shape)}{alt} like logprobs, got "
                         f"{tuple(advantages.shape)}")


def clamped_log_ratio(logprobs: torch.Tensor, other_logprobs: torch.Tensor) -> torch.Tensor:
    """logprobs - other_logprobs, clamped to [-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP] so that its exp is finite."""
    return torch.clamp(logprobs - other_logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def clipped_surrogate(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate (Schulman et al. 2017), per token.

    loss = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A), ratio = exp(logp - old).
    Separate low and high clip ranges follow DAPO's clip-higher (e.g. 0.2 / 0.28).
    dual_clip = c > 1 (Ye et al. 2020): for A < 0 the loss is also capped at c * |A|, so a
    token whose ratio has exploded cannot dominate the batch.
    The log-ratio is clamped to +-LOG_RATIO_CLAMP before exp.
    """
    _check_like("old_logprobs", old_logprobs, logprobs)
    _check_advantages(advantages, logprobs)
    ratio = torch.exp(clamped_log_ratio(logprobs, old_logprobs))
    unclipped = ratio * advantages
    clipped_obj = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped_obj)
    clipped = clipped_obj < unclipped
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        cap = -dual_clip * advantages
        capped = (advantages < 0) & (loss > cap)
        loss = torch.where(capped, cap, loss)
        clipped = clipped | capped
    return loss, clipped


def sequence_log_ratio(logprobs: torch.Tensor, old_logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(N, 1) length-normalised sequence log importance ratio: mean over valid tokens of logp - old
    (padding selected away, so a NaN there changes nothing)."""
    _check_like("old_logprobs", old_logprobs, logprobs)
    _check_like("mask", mask, logprobs)
    per_token = torch.where(mask.bool(), logprobs - old_logprobs, 0)
    return per_token.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)


def gspo_surrogate(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                   clip_low: float = 3e-4, clip_high: float = 4e-4) -> tuple[torch.Tensor, torch.Tensor]:
    """GSPO (Zheng et al. 2025): the importance ratio and its clip are per sequence,
    s = exp(mean_t (logp_t - old_t)), instead of per token.

    Written in the paper's GSPO-token form: each token's ratio has the value s and the
    gradient s * grad logp_t, so per-token advantages are allowed, and with
    loss_agg=seq_mean_token_mean the gradient is exactly GSPO's
    mean_i s_i A_i (1/|y_i|) sum_t grad logp_t (for unclipped sequences)."""
    _check_advantages(advantages, logprobs)
    token_log_ratio = sequence_log_ratio(logprobs, old_logprobs, mask).detach() + logprobs - logprobs.detach()
    return clipped_surrogate(token_log_ratio, torch.zeros_like(logprobs), advantages, clip_low, clip_high)


def cispo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
               clip_low: float = 1.0, clip_high: float = 0.28) -> tuple[torch.Tensor, torch.Tensor]:
    """CISPO (MiniMax-M1, 2025): REINFORCE with a clipped, detached importance weight,
    loss = -sg(clip(ratio, 1 - clip_low, 1 + clip_high)) * A * logp.

    Unlike PPO's clip, no token's gradient is dropped: a clipped token still contributes,
    with its weight capped. clip_low = 1 leaves the weight unbounded below (the paper's setting)."""
    _check_like("old_logprobs", old_logprobs, logprobs)
    _check_advantages(advantages, logprobs)
    ratio = torch.exp(clamped_log_ratio(logprobs, old_logprobs)).detach()
    weight = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return -weight * advantages * logprobs, weight != ratio


def policy_gradient_loss(logprobs: torch.Tensor, advantages: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Plain on-policy policy gradient (REINFORCE): loss = -A * logp. Valid only for the
    first gradient step on freshly sampled data (no importance ratio)."""
    _check_advantages(advantages, logprobs)
    return -advantages * logprobs, torch.zeros_like(logprobs, dtype=torch.bool)


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from tokens sampled from the policy
    (Schulman 2020, "Approximating KL Divergence"), with log r = ref - logp:
    k1 = -log r (unbiased, can be negative), k2 = (log r)^2 / 2 (biased, low variance),
    k3 = r - 1 - log r (unbiased, always >= 0).
    log r is clamped to +-LOG_RATIO_CLAMP first, for all three."""
    _check_like("ref_logprobs", ref_logprobs, logprobs)
    lr = clamped_log_ratio(ref_logprobs, logprobs)
    if kind == "k1":
        return -lr
    if kind == "k2":
        return 0.5 * lr**2
    if kind == "k3":
        return torch.exp(lr) - lr - 1.0
    raise ValueError(f"unknown KL estimator {kind!r}; choose one of {KL_ESTIMATORS}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dimension: logsumexp(l) - sum softmax(l) * l."""
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


def truncated_is_weights(trainer_logprobs: torch.Tensor, engine_logprobs: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling (Yao et al. 2025, "Your efficient RL framework secretly
    brings you off-policy RL training"): the rollout engine samples from pi_engine while the
    trainer's pi_old differs (kernels, precision); each token's loss is weighted by
    min(pi_old / pi_engine, cap), detached (log-ratio clamped to +-LOG_RATIO_CLAMP first)."""
    _check_like("engine_logprobs", engine_logprobs, trainer_logprobs)
    return torch.clamp(torch.exp(clamped_log_ratio(trainer_logprobs, engine_logprobs)), max=cap).detach()


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float | None = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO value loss per token: 0.5 * max((V - R)^2, (V_old + clip(V - V_old, +-clip) - R)^2).
    Returns (loss, clipped) where clipped marks tokens where the clipped term was larger."""
    unclipped = (values - returns) ** 2
    if clip is None:
        return 0.5 * unclipped, torch.zeros_like(values, dtype=torch.bool)
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    clipped = (clipped_values - returns) ** 2
    return 0.5 * torch.maximum(unclipped, clipped), clipped > unclipped


@dataclass(frozen=True)
class LossNorm:
    """Normalisers of one optimizer step's whole (mini-)batch, so that splitting it into
    micro-batches and summing their losses gives the full-batch loss exactly."""

    num_tokens: float  # valid tokens in the batch
    num_seqs: float  # sequences in the batch
    constant: float  # Dr. GRPO's fixed per-sequence token budget (e.g. max_new_tokens)

    @classmethod
    def of(cls, mask: torch.Tensor, constant: float) -> "LossNorm":
        return cls(float(mask.sum()), float(mask.shape[0]), float(constant))


def aggregate(values: torch.Tensor, mask: torch.Tensor, mode: str, norm: LossNorm) -> torch.Tensor:
    """Reduce (N, T) per-token values of a micro-batch to its share of the batch scalar.

    token_mean          sum over all tokens / tokens in the batch (DAPO): every token weighs
                        the same, so long sequences weigh more.
    seq_mean_token_sum  per-sequence sums, averaged over sequences.
    seq_mean_token_mean per-sequence means, averaged over sequences (original GRPO): each
                        sequence weighs the same, so long sequences' tokens weigh less.
    constant            sum / (sequences * constant) (Dr. GRPO): no length normalisation,
                        hence no length bias, at a fixed scale.
    mask is 0/1; padding is selected away (torch.where), so a NaN or inf there changes
    neither the value nor the gradient."""
    if values.shape != mask.shape:
        raise ValueError(f"values and mask must have the same shape, got values {tuple(values.shape)} "
                         f"and mask {tuple(mask.shape)}")
    masked = torch.where(mask.bool(), values, 0)
    if mode == "token_mean":
        return masked.sum() / max(norm.num_tokens, 1.0)
    if mode == "seq_mean_token_sum":
        return masked.sum() / max(norm.num_seqs, 1.0)
    if mode == "seq_mean_token_mean":
        return (masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).sum() / max(norm.num_seqs, 1.0)
    if mode == "constant":
        return masked.sum() / max(norm.num_seqs * norm.constant, 1.0)
    raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {AGGREGATIONS}")

