"""A reward model: linear heads on a causal LM's final hidden state at the last real token.

The body is the causal LM itself (its `base_model`), so a trained reward model is saved as
the LM (a loadable model folder) plus one small head, and any causal LM can be the body.
With more than one head the heads form an ensemble on one shared body (Coste et al. 2023
use separate bodies; sharing one costs a single forward pass and still lets the heads
disagree where the data does not pin them down), scored as their mean, min, or
mean - k * std."""

from __future__ import annotations

import torch
from torch import nn

from aha.models.compute import autocast, on_device

SCORES = ("mean", "min", "mean_minus_std")


def reward_head(hidden_size: int, heads: int, seed: int, std: float = 0.02) -> nn.Linear:
    """Linear(hidden_size, heads), weights N(0, std^2) from a generator seeded with `seed`
    (the same run gives the same head whatever else used the global RNG), bias 0.

    Not zero like the critic's head (models/value.py): zero heads would all be the same
    function, and an ensemble's heads must differ. Each head gets its own random
    direction here, and the trainer (training/supervised/reward_model.py) also trains each head on
    its own bootstrap resample of the pairs, the classic way to make ensemble members
    disagree where the data is thin. std 0.02 is the usual transformer initialiser
    range, so first scores are small and the loss starts near log 2."""
    head = nn.Linear(hidden_size, heads)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.weight.copy_(torch.randn(heads, hidden_size, generator=generator) * std)
        head.bias.zero_()
    return head


def last_token_hidden(lm, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(N, H) final hidden state (after the body's last norm) at each row's last real token.
    Rows are right-padded, so the last real token has seen the whole prompt and completion;
    where it is comes from the mask, not the token ids (pad may equal EOS)."""
    input_ids, attention_mask = on_device(lm.device, input_ids, attention_mask)
    hidden = lm.base_model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    last = attention_mask.sum(dim=1) - 1
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


def ensemble_score(rewards: torch.Tensor, how: str = "mean", k: float = 1.0) -> torch.Tensor:
    """(N, heads) -> (N,): the heads' mean, min, or mean - k * std. std is the population
    std over heads (0 for one head, so every score of one head is that head's value)."""
    if how == "mean":
        return rewards.mean(dim=1)
    if how == "min":
        return rewards.min(dim=1).values
    if how == "mean_minus_std":
        return rewards.mean(dim=1) - k * rewards.std(dim=1, unbiased=False)
    raise ValueError(f"ensemble score must be one of {', '.join(SCORES)}, got {how!r}")


def right_pad(sequences: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), each row's tokens first, padding after."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1
    return ids, mask


class RewardModel(nn.Module):
    """The LM (body) and the heads as one module: one optimizer, one gradient clip and one
    train()/eval() cover both. Checkpoints save `lm` as "model" and `head` as "reward_head"."""

    def __init__(self, lm, head: nn.Linear, pad_id: int):
        super().__init__()
        self.lm = lm
        self.head = head.to(lm.device)
        self.pad_id = pad_id

    @property
    def heads(self) -> int:
        return self.head.out_features

    def forward(self, sequences: list[list[int]], dtype: torch.dtype = torch.float32,
                with_hidden: bool = False):
        """(N, heads) fp32 rewards of token sequences (prompt + completion), and with
        with_hidden the (N, H) last-token hidden states too. Differentiable unless called
        under no_grad. On the CPU, whichever device the model runs on."""
        ids, mask = right_pad(sequences, self.pad_id)
        with autocast(dtype, self.lm.device):
            hidden = last_token_hidden(self.lm, ids, mask).float()
        rewards = self.head(hidden)  # in fp32: the body's dtype policy, the scores at full precision
        cpu = torch.device("cpu")
        return on_device(cpu, rewards, hidden) if with_hidden else on_device(cpu, rewards)
