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
from aha.algorithms.corrections import (
    IS_LEVELS,
    IS_MODES,
    importance_log_ratio,
    importance_weights,
    outside_fractions,
)
from aha.algorithms.distillation import advantage_share, distillation_advantages
from aha.algorithms.length_shaping import (
    BUCKETS,
    adapt_prompt_coefs,
    difficulty_buckets,
    ecr_target,
    fewest_right,
    laser_bonus,
    laser_d_targets,
    row_targets,
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
from aha.algorithms.pairwise import WinRates, win_rates
from aha.algorithms.preference import (
    bco_pair_loss,
    bradley_terry_loss,
    dpo_loss,
    hinge_loss,
    ipo_loss,
    kto_loss,
    kto_reference_point,
    orpo_loss,
    preference_logits,
    reward_offset,
    simpo_loss,
    tdpo_loss,
    token_kl,
)
from aha.algorithms.shaping import (
    adapt_length_coef,
    dither_rewards,
    length_cost,
    outcome_token_rewards,
    overlong_penalty,
    replay_priorities,
)
from aha.algorithms.step_rewards import (
    STEP_TRANSFORMS,
    flat_step_groups,
    step_group_advantages,
    transform_step_rewards,
)
from aha.algorithms.surrogates import gmpo_loss, sapo_loss

__all__ = [
    "bradley_terry_loss",
    "dpo_loss",
    "ipo_loss",
    "kto_loss",
    "kto_reference_point",
    "orpo_loss",
    "preference_logits",
    "simpo_loss",
    "bco_pair_loss", "hinge_loss", "reward_offset", "tdpo_loss", "token_kl",
    "adapt_length_coef", "length_cost",
    "BUCKETS", "adapt_prompt_coefs", "difficulty_buckets", "ecr_target", "fewest_right", "laser_bonus",
    "laser_d_targets", "row_targets",
    "AGGREGATIONS", "KL_ESTIMATORS", "LOG_RATIO_CLAMP", "LossNorm", "aggregate", "cispo_loss", "clamped_log_ratio",
    "clipped_surrogate", "clipped_value_loss", "discounted_returns", "dither_rewards", "entropy_from_logits",
    "finite_reward_mask", "gae_advantages",
    "grpo_advantages", "gspo_surrogate", "kl_estimate", "ktae_token_weights", "masked_mean", "masked_whiten",
    "outcome_token_rewards", "overlong_penalty", "policy_gradient_loss", "reinforce_pp_advantages",
    "remax_advantages", "replay_priorities", "rloo_advantages", "sequence_log_ratio", "truncated_is_weights",
    "zero_variance_groups",
    "advantage_share", "distillation_advantages",
    "IS_LEVELS", "IS_MODES", "gmpo_loss", "importance_log_ratio", "importance_weights", "outside_fractions",
    "sapo_loss",
    "WinRates", "win_rates",
    "STEP_TRANSFORMS", "flat_step_groups", "step_group_advantages", "transform_step_rewards",
]
