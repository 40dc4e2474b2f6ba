"""The bookkeeping of step-level search at inference (`aha eval --search`), as pure functions
of numbers: how a step ended, how candidates rank, which are kept, and how many best-of-N
samples cost as many generated tokens as the search did.

A candidate is a partial or finished solution. Its key (higher is better) says how it ranks:

- a judge of partial solutions (a process reward model) scores every candidate: the key is
  its score, one tier for all;
- a judge of finished answers (a verifier, an outcome reward model) can say nothing of an
  unfinished one, so the tiers do the work: a finished answer that passes the threshold
  ranks first, then the unfinished ones (not judged yet, all equal), then the finished ones
  that fail it;
- a candidate its judge failed on (None, NaN, inf) ranks last.

Ties go to the earlier candidate (the earlier beam's children first, then the order they
were sampled in), so a search is reproducible whatever the sort's stability."""

from __future__ import annotations

import math

# what ended a step: the model's stop token, the step separator, or the solution's token budget
STOP, STEP, BUDGET = "stop", "step", "budget"
FAILED, FAILING, UNJUDGED, RANKED, PASSING = -1, 0, 1, 1, 2  # the tiers of a key


def step_end(tokens: list[int], budget: int, stop_ids: set[int], separator_ids: set[int]) -> str:
    """How a sampled step ended: STOP at a stop token; BUDGET when it used all `budget` tokens it
    could have (the solution is cut there, even on a separator: no token is left for a next
    step); else STEP at a separator token. A shorter step without either ending is a caller's
    error."""
    if tokens and tokens[-1] in stop_ids:
        return STOP
    if len(tokens) >= budget:  # a separator on the budget's last token leaves nothing for a next step
        return BUDGET
    if tokens and tokens[-1] in separator_ids:
        return STEP
    raise ValueError(f"a step of {len(tokens)} tokens (budget {budget}) ends on neither a stop nor a separator")


def candidate_key(score: float | None, finished: bool, judges_partial: bool,
                  threshold: float) -> tuple[int, float]:
    """(tier, score): sorted descending, the best candidate first. score is None where the
    judge did not score the candidate (an unfinished one, for a judge of finished answers)
    or failed on it."""
    judged = judges_partial or finished
    if not judged:
        return (UNJUDGED, 0.0)
    if score is None or not math.isfinite(score):
        return (FAILED, 0.0)
    if judges_partial:
        return (RANKED, score)
    return (PASSING, score) if score >= threshold - 1e-6 else (FAILING, score)


def keep_best(keys: list[tuple[int, float]], width: int) -> list[int]:
    """The indices of the `width` best keys, best first; equal keys in index order."""
    return sorted(range(len(keys)), key=lambda i: (-keys[i][0], -keys[i][1], i))[:width]


def equal_token_n(search_tokens: int, round_tokens: list[int]) -> int:
    """The N whose best-of-N costs the nearest to search_tokens: round_tokens[r] is what the
    (r+1)-th sample of every problem cost together, so N samples cost the first N rounds' sum.
    A tie goes to the smaller N (fewer tokens than the search, never more for nothing);
    at least 1."""
    if not round_tokens:
        raise ValueError("equal_token_n needs at least one round of samples")
    best, best_gap, total = 1, None, 0
    for n, cost in enumerate(round_tokens, start=1):
        total += cost
        gap = abs(total - search_tokens)
        if best_gap is None or gap < best_gap:
            best, best_gap = n, gap
    return best


def best_index(keys: list[tuple[int, float]]) -> int:
    """The best candidate's index (the first of equal keys)."""
    return keep_best(keys, 1)[0]
