"""Pure maths of RL post-training: advantages, policy losses, KL estimators, shaping,
preference losses.

Every function here takes and returns tensors; none knows about models, engines or files.
"""

from aha.algorithms.advantages import (
    discounted_returns,
    finite_reward_mask,
    gae_advantages,
    grpo_advantages,
    ktae_token_weights,
    masked_mean,
    masked_whiten,
    reinforce_pp_advantages,
    remax_advantages,
    rloo_advantages,
    zero_variance_groups,
)
from aha.algorithms.losses import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    LOG_RATIO_CLAMP,
    LossNorm,
    aggregate,
    cispo_loss,
    clamped_log_ratio,
    clipped_surrogate,
    clipped_value_loss,
    entropy_from_logits,
    gspo_surrogate,
    kl_estimate,
    policy_gradient_loss,
    sequence_log_ratio,
    truncated_is_weights,
)
from aha.algorithms.preference import (
    bradley_terry_loss,
    dpo_loss,
    ipo_loss,
    kto_loss,
    kto_reference_point,
    orpo_loss,
    preference_logits,
    simpo_loss,
)
from aha.algorithms.shaping import (
    adapt_length_coef,
    dither_rewards,
    length_cost,
    outcome_token_rewards,
    overlong_penalty,
    replay_priorities,
)

__all__ = [
    "bradley_terry_loss",
    "dpo_loss",
    "ipo_loss",
    "kto_loss",
    "kto_reference_point",
    "orpo_loss",
    "preference_logits",
    "simpo_loss",
    "adapt_length_coef", "length_cost",
    "AGGREGATIONS", "KL_ESTIMATORS", "LOG_RATIO_CLAMP", "LossNorm", "aggregate", "cispo_loss", "clamped_log_ratio",
    "clipped_surrogate", "clipped_value_loss", "discounted_returns", "dither_rewards", "entropy_from_logits",
    "finite_reward_mask", "gae_advantages",
    "grpo_advantages", "gspo_surrogate", "kl_estimate", "ktae_token_weights", "masked_mean", "masked_whiten",
    "outcome_token_rewards", "overlong_penalty", "policy_gradient_loss", "reinforce_pp_advantages",
    "remax_advantages", "replay_priorities", "rloo_advantages", "sequence_log_ratio", "truncated_is_weights",
    "zero_variance_groups",
]
