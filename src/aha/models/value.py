"""A value model (critic) for PPO with GAE."""

from __future__ import annotations

import copy

import torch
from torch import nn

from aha.models.adapters import merge_lora


class ValueModel(nn.Module):
    """A copy of the policy's transformer with a scalar head, as in Open-Reasoner-Zero
    (critic initialised from the base model). The head starts at zero, so the first
    advantages are the plain returns and the critic learns from there."""

    def __init__(self, policy):
        super().__init__()
        # a LoRA policy's backbone is copied with its adapters folded in: the critic trains
        # every weight of its own copy, and peft's layers would only slow it down
        self.backbone = merge_lora(copy.deepcopy(policy.base_model)).requires_grad_(True)
        self.config = policy.config
        self.head = nn.Linear(policy.config.hidden_size, 1, device=policy.device)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def values(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(N, T) value of the state before each completion token, 0 on padding; on the device of
        mask (the rollouts' CPU), hidden on the critic's."""
        return (self.head(hidden).squeeze(-1).float() * mask.to(hidden.device)).to(mask.device)
