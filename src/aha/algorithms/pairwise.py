"""Win rates within a group from a pairwise judge (SPO-style self-play preference: Swamy et al.
2024, arXiv 2401.04056): each completion is paid its average chance of beating the others.

The judge is asked about every ordered pair (i, j), i != j, with i shown first as "A" and j
second as "B"; first[i, j] is its P(A) / (P(A) + P(B)), the chance it says the first one is
better. A judge prefers the first (or second) position more or less whatever it reads, so each
pair is asked in both orders and the two verdicts are averaged:

    win[i, j] = (first[i, j] + 1 - first[j, i]) / 2      (win[i, j] + win[j, i] = 1)
    rate[i]   = mean over j != i of win[i, j]             (sum over i of rate[i] = G / 2)

A judge that cannot tell the completions apart (first[i, j] the same for every pair, whatever
its bias) pays every completion 0.5. What the averaging hides is measured beside it:

    position_bias = mean over i != j of first[i, j] - 0.5    (> 0: it favours the first shown)
    consistency   = share of unordered pairs whose two verdicts pick the same completion"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class WinRates:
    """A group's win rates and what the judge did to give them."""

    rates: torch.Tensor  # (G,) each completion's mean chance of beating another
    position_bias: float  # mean P(first is better) over ordered pairs, minus 0.5
    consistency: float  # share of pairs judged the same way in both orders


def win_rates(first: torch.Tensor) -> WinRates:
    """first: (G, G), first[i, j] = P(the judge prefers i) with i shown first; the diagonal is
    ignored. G = 1 has nobody to beat: rate 0.5, no bias and full consistency by convention."""
    if first.dim() != 2 or first.shape[0] != first.shape[1]:
        raise ValueError(f"first must be a square (G, G) matrix, got shape {tuple(first.shape)}")
    G = first.shape[0]
    if G == 1:
        return WinRates(torch.full((1,), 0.5), 0.0, 1.0)
    first = first.double()
    off = ~torch.eye(G, dtype=torch.bool)
    win = (first + 1 - first.T) / 2
    rates = (win * off).sum(dim=1) / (G - 1)
    bias = float(first[off].mean()) - 0.5
    upper = torch.triu(torch.ones(G, G, dtype=torch.bool), diagonal=1)
    # i first says "i" (first[i, j] > 0.5) and j first says "i" too (first[j, i] < 0.5), or both say "j"
    same = (first > 0.5) == (first.T < 0.5)
    return WinRates(rates.float(), bias, float(same[upper].float().mean()))
