"""Pure maths of RL post-training: advantages, policy losses, KL estimators.

Every function here takes and returns tensors; none knows about models, engines or files.
"""

from aha.algorithms.advantages import grpo_advantages
from aha.algorithms.losses import (
    clipped_surrogate,
    kl_k3,
    token_mean,
)

__all__ = ["grpo_advantages", "clipped_surrogate", "kl_k3", "token_mean"]
