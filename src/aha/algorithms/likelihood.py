"""VeriFree's reward (Zhou et al. 2025, "Reinforcing General Reasoning without Verifiers"): the
policy's own likelihood of the reference answer y* after its reasoning z, pi(y* | x, z), in
place of a verifier's verdict. The maths of reading it from per-token log-probs.

Three readings of the same log-probs of y*'s tokens (likelihood_reward.aggregate):
- prob: exp(sum), the probability of the whole answer, in [0, 1] (the paper's reward);
- sum: the sum, its log (<= 0): a wrong reasoning is paid far less than with prob, not ~0;
- mean: the mean per token (<= 0): a long answer is not paid less for its length.
"""

from __future__ import annotations

import torch


def _sum(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (logprobs * mask).sum(dim=1)


def _mean(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _sum(logprobs, mask) / mask.sum(dim=1).clamp(min=1)


# likelihood_reward.aggregate -> (N, T) log-probs and mask -> (N,) rewards. The config's Literal
# reads its names from here (a test checks they agree).
LIKELIHOOD_AGGREGATES = {
    "prob": lambda logprobs, mask: _sum(logprobs, mask).exp(),
    "sum": _sum,
    "mean": _mean,
}


def answer_likelihood(logprobs: torch.Tensor, mask: torch.Tensor, aggregate: str = "prob") -> torch.Tensor:
    """(N,) each row's reward from the log-probs (N, T) of its answer's tokens (mask (N, T):
    1 on the answer's tokens, 0 on padding). A row with no answer token reads as an empty
    answer: sum 0, probability 1, mean 0."""
    if aggregate not in LIKELIHOOD_AGGREGATES:
        raise ValueError(f"unknown aggregate {aggregate!r} (known: {', '.join(LIKELIHOOD_AGGREGATES)})")
    return LIKELIHOOD_AGGREGATES[aggregate](logprobs.float(), mask.float())
