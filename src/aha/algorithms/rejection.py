"""Rejection sampling for expert iteration (STaR, Zelikman et al. 2022; RFT, Yuan et al.
2023; Havrilla et al. 2024, *Teaching Large Language Models to Reason with Reinforcement
Learning*): of the completions sampled for each prompt, which ones the next supervised
steps learn from.

A completion is eligible when its reward total reaches the threshold, the reward did not
fail on it, and it was not cut at the token budget (it has no stop token: learning it would
teach the model not to stop). Of a prompt's eligible completions the method keeps
  all       every one (the same text may be learned twice),
  distinct  one of each distinct text (RFT's de-duplication of reasoning paths),
  one       the first (STaR keeps one rationale per problem).
"""

from __future__ import annotations

import math

KEEP = ("all", "distinct", "one")


def eligible(totals: list[float], failed: list[bool], truncated: list[bool], threshold: float) -> list[bool]:
    """Which completions pass: a finite reward total >= threshold, not failed, not truncated.
    A non-finite total (NaN, inf) never passes."""
    if not len(totals) == len(failed) == len(truncated):
        raise ValueError(f"totals, failed and truncated must have one entry per completion, got {len(totals)}, "
                         f"{len(failed)} and {len(truncated)}")
    return [math.isfinite(t) and t >= threshold and not f and not cut
            for t, f, cut in zip(totals, failed, truncated)]


def kept_rows(passed: list[bool], texts: list[str], group_size: int, keep: str) -> list[int]:
    """Indices of the completions to learn from, in order. Rows come in groups of group_size
    completions of one prompt (row r answers prompt r // group_size)."""
    if keep not in KEEP:
        raise ValueError(f"unknown keep rule {keep!r}; choose one of {KEEP}")
    if group_size < 1 or len(passed) % group_size:
        raise ValueError(f"{len(passed)} completions do not make whole groups of {group_size}")
    if len(texts) != len(passed):
        raise ValueError(f"{len(texts)} texts for {len(passed)} completions")
    rows = []
    for start in range(0, len(passed), group_size):
        seen: set[str] = set()
        for row in range(start, start + group_size):
            if not passed[row] or (keep == "distinct" and texts[row] in seen):
                continue
            seen.add(texts[row])
            rows.append(row)
            if keep == "one":
                break
    return rows


def unsolved_groups(passed: list[bool], group_size: int) -> list[int]:
    """The groups (prompt positions) none of whose completions passed: STaR's
    rationalisation retries them with the answer shown."""
    return [g for g in range(len(passed) // group_size) if not any(passed[g * group_size:(g + 1) * group_size])]
