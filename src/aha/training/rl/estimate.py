"""From a scored batch to per-token advantages: wiring of the estimators in aha.algorithms."""

from __future__ import annotations

import torch

from aha.algorithms import (
    advantage_share,
    distillation_advantages,
    finite_reward_mask,
    gae_advantages,
    grpo_advantages,
    kl_estimate,
    ktae_token_weights,
    masked_mean,
    masked_whiten,
    outcome_token_rewards,
    reinforce_pp_advantages,
    remax_advantages,
    rloo_advantages,
    step_group_advantages,
)
from aha.algorithms.guidance import cap_guided_advantages
from aha.config import AlgorithmConfig
from aha.training.rl.batch import Batch


def _gae(token_rewards, mask, batch: Batch, algo: AlgorithmConfig, G: int, stats: dict) -> torch.Tensor:
    advantages, batch.returns = gae_advantages(token_rewards, batch.old_values, mask, algo.gamma, algo.lam)
    stats["value/mean"] = float(masked_mean(batch.old_values, mask))
    return advantages


# algorithm.advantage -> estimator. Sequence-level ones map (groups, G) rewards to (groups, G)
# advantages, spread over each completion's tokens; token-level ones map (N, T) per-token
# rewards to (N, T) advantages. A new estimator is one entry here plus its name in the
# config's Literal (a test checks they agree).
SEQUENCE_ESTIMATORS = {
    "grpo": lambda rewards, batch, algo: grpo_advantages(rewards, algo.advantage_scale),
    "rloo": lambda rewards, batch, algo: rloo_advantages(rewards),
    "remax": lambda rewards, batch, algo: remax_advantages(rewards, batch.baseline.view(rewards.shape)[:, 0]),
}
TOKEN_ESTIMATORS = {
    "reinforce_pp": lambda token_rewards, mask, batch, algo, G, stats:
        reinforce_pp_advantages(token_rewards, mask, algo.gamma, G if algo.group_baseline else None),
    "gae": _gae,
}


def _step_level(token_rewards, mask, batch: Batch, algo: AlgorithmConfig, G: int, finite) -> torch.Tensor:
    """algorithm.step_advantages: the step rewards judged against their group's steps
    (aha.algorithms.step_group_advantages: grpo -> DeepSeekMath's process supervision, rloo ->
    PRIME's leave-one-out), plus the estimator's own advantage of the rest of each reward (an
    outcome verifier, length shaping, a KL penalty), paid on every token as without steps: the
    two sources each get their own baseline and add up, as PRIME and PURE add theirs."""
    steps = torch.zeros_like(token_rewards) if batch.step_rewards is None else batch.step_rewards * mask
    ends = (steps != 0) if batch.step_ends is None else batch.step_ends
    if not algo.task_reward:
        steps = torch.zeros_like(steps)
    outcome = (token_rewards - steps).sum(dim=1).view(-1, G)
    seq_adv = SEQUENCE_ESTIMATORS[algo.advantage](outcome, batch, algo).view(-1)
    step_adv = step_group_advantages(steps, ends, mask, G, "mean" if algo.advantage == "grpo" else "loo",
                                     algo.advantage_scale, rows=finite)
    return seq_adv.unsqueeze(1) * mask + step_adv


def estimate_advantages(batch: Batch, algo: AlgorithmConfig, group_size: int) -> dict:
    """Fill batch.advantages (and batch.returns for gae) in place; return statistics.

    Needs batch.ref_logprobs when the KL penalty goes into the reward, and batch.old_values
    for gae. Each sequence's reward sits on its last token, except the part a process reward
    model gave per step (batch.step_rewards), which sits on the tokens that close the steps;
    with kl_in=reward every token also pays kl_coef * KL(sampling policy || reference) at
    that token. A sequence-level estimator sees the sum over the tokens, the same either way,
    unless algorithm.step_advantages judges the steps against their group's (_step_level).

    A non-finite reward (NaN, inf) reaches the estimators as it is: they give its row zero
    advantage and leave it out of its group's statistics (and whitening leaves it at 0).
    stats["reward/nonfinite"] counts those rows. With algorithm.task_reward=false the rewards
    count as 0 here (a KL penalty in the reward still applies): only the teacher's term, added
    later by add_teacher_term, trains."""
    G = group_size
    mask = batch.rollouts.completion_mask
    finite = finite_reward_mask(batch.rewards)
    trusted = mask * finite.unsqueeze(1).to(mask.dtype)  # the tokens of rows whose reward is finite
    if batch.step_rewards is None:
        token_rewards = outcome_token_rewards(batch.rewards, mask)
    else:  # what the steps were not paid of the reward (other components, shaping) at the last token
        step_rewards = batch.step_rewards * mask
        token_rewards = outcome_token_rewards(batch.rewards - step_rewards.sum(dim=1), mask) + step_rewards
    stats = {"reward/nonfinite": int((~finite).sum())}
    if not algo.task_reward:  # distillation alone: the reward was scored and logged, it trains nothing
        token_rewards = torch.zeros_like(token_rewards)
    if algo.kl_coef > 0 and algo.kl_in == "reward":
        kl = kl_estimate(batch.rollouts.sampling_logprobs, batch.ref_logprobs, algo.kl_estimator)
        kl = torch.where(mask.bool(), kl, 0)
        token_rewards = token_rewards - algo.kl_coef * kl
        stats["kl/ref"] = float(masked_mean(kl, mask))
    if algo.step_advantages:
        advantages = _step_level(token_rewards, mask, batch, algo, G, finite)
    elif algo.advantage in SEQUENCE_ESTIMATORS:
        rewards = token_rewards.sum(dim=1).view(-1, G)
        seq_adv = SEQUENCE_ESTIMATORS[algo.advantage](rewards, batch, algo).view(-1)
        advantages = seq_adv.unsqueeze(1) * mask
        if algo.token_weighting == "ktae":
            advantages = advantages * ktae_token_weights(batch.rollouts.completion_ids, mask, seq_adv, G,
                                                         algo.ktae_alpha)
    elif algo.advantage in TOKEN_ESTIMATORS:
        advantages = TOKEN_ESTIMATORS[algo.advantage](token_rewards, mask, batch, algo, G, stats)
    else:
        raise ValueError(f"unknown advantage estimator {algo.advantage!r}")
    if algo.whiten_advantages:
        advantages = masked_whiten(advantages, trusted)
    if batch.guided is not None:  # ExPO's answer-shown rows: an off-policy positive may not dominate its group
        advantages = cap_guided_advantages(advantages, batch.guided, algo.guidance_cap)
        if batch.guided.any():
            stats["guidance/advantage_mean"] = float(masked_mean(advantages[batch.guided], mask[batch.guided]))
    batch.advantages = advantages
    stats["advantage/mean"] = float(masked_mean(advantages, mask))
    stats["advantage/abs_mean"] = float(masked_mean(advantages.abs(), mask))
    return stats


def add_teacher_term(batch: Batch, algo: AlgorithmConfig) -> dict:
    """On-policy distillation (algorithm.teacher): every sampled token's advantage gains
    -teacher_coef * (log pi_old - log pi_teacher), added after the estimator and whitening so
    that teacher_coef keeps its meaning. Needs batch.old_logprobs (the policy that sampled) and
    batch.teacher_logprobs. Why an advantage term rather than a KL in the loss:
    aha.algorithms.distillation."""
    mask = batch.rollouts.completion_mask
    term = distillation_advantages(batch.old_logprobs, batch.teacher_logprobs, mask, algo.teacher_coef)
    stats = {"distill/reverse_kl": float(masked_mean(batch.old_logprobs - batch.teacher_logprobs, mask)),
             "distill/advantage_share": advantage_share(batch.advantages, term, mask)}
    batch.advantages = batch.advantages + term
    stats["advantage/mean"] = float(masked_mean(batch.advantages, mask))
    stats["advantage/abs_mean"] = float(masked_mean(batch.advantages.abs(), mask))
    return stats
