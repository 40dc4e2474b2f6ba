"""Reward-model training maths beyond the plain Bradley-Terry loss (algorithms/preference.py):
PCRM's cap on the score gap, the priors it is computed from, and bootstrap weights that make
the heads of an ensemble differ.

PCRM (Zhou et al. 2024, "Prior Constraints-based Reward Model Training for Aligning Large
Language Models", arXiv 2404.00978). The formula here is the authors' released code
(github.com/wangclnlp/DeepSpeed-Chat-Extension, PCRM branch,
dschat/utils/model/reward_model.py), which we read; the paper's own text was not available
to us. Per pair, with gap = r_w - r_l and a similarity s in (0, 1]:

    delta* = beta1 / (s + beta2) + beta3
    loss   = -log sigma(gap) - log sigma(delta* - gap)

The second term caps the gap near delta*: the more alike the two completions, the smaller
the gap the model may put between them, so scores do not grow without bound on pairs that
barely differ. Their similarities: the length ratio of the two token sequences after their
common prefix (shorter / longer), or (pi - arccos(clamp(cos, 0, 1))) / pi of two sentence
embeddings from a separate frozen encoder (RoBERTa). Differences here: the gap is read at
the last token (the code averages per-token gaps from the first differing token on), and
the cosine's embeddings are the final hidden states at the last token from the reward
model's own body as the run starts (no second model), computed once and frozen.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def pcrm_cap(similarity: torch.Tensor, beta1: float, beta2: float, beta3: float) -> torch.Tensor:
    """delta* = beta1 / (similarity + beta2) + beta3, per pair."""
    return beta1 / (similarity + beta2) + beta3


def pcrm_upper_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, cap: torch.Tensor) -> torch.Tensor:
    """PCRM's second term, -log sigma(delta* - (r_w - r_l)); added to the Bradley-Terry loss."""
    return -F.logsigmoid(cap - (chosen_rewards - rejected_rewards))


def length_ratio(chosen: list[int], rejected: list[int]) -> float:
    """Shorter / longer token count of the two completions after their common prefix (1.0
    when nothing differs): pairs that differ in a few tokens of like length count as alike."""
    start = 0
    while start < min(len(chosen), len(rejected)) and chosen[start] == rejected[start]:
        start += 1
    a, b = len(chosen) - start, len(rejected) - start
    return 1.0 if max(a, b) == 0 else min(a, b) / max(a, b)


def angular_similarity(chosen: torch.Tensor, rejected: torch.Tensor) -> torch.Tensor:
    """(N, H), (N, H) embeddings -> (N,) (pi - arccos(clamp(cos, 0, 1))) / pi, in [0.5, 1]."""
    cos = F.cosine_similarity(chosen.float(), rejected.float(), dim=1).clamp(0.0, 1.0)
    return (math.pi - torch.acos(cos)) / math.pi


def bootstrap_weights(n: int, heads: int, seed: int) -> torch.Tensor:
    """(n, heads) how many times each pair is in each head's resample: one head sees every
    pair once; with more, each head draws its own n pairs with replacement (Efron's
    bootstrap, as in bootstrapped DQN ensembles), from a generator seeded by (seed, head)
    so the weights are a function of the config and a resume needs no state for them.

    Why a resample per head and not only a different init: a linear head on a shared body
    trained on the same pairs converges to nearly the same function whatever its start,
    so the ensemble's spread would say little. Resamples leave about 37% of the pairs out of
    each head, and the heads then disagree where the data is thin: that disagreement is
    what a pessimistic score (min, mean - k*std) penalises."""
    if heads == 1:
        return torch.ones(n, 1)
    columns = []
    for head in range(heads):
        generator = torch.Generator().manual_seed(seed * 1000 + head)
        draws = torch.randint(0, n, (n,), generator=generator)
        columns.append(torch.bincount(draws, minlength=n).float())
    return torch.stack(columns, dim=1)
