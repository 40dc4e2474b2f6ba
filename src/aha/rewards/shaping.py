"""Reward shaping terms that read the completion: length penalties, a target-length step
bonus, and a calibration reward for a stated confidence. Lengths are in words (rewards see
text, not tokens). Each is fn(completion, sample, **args) -> float."""

from __future__ import annotations

import re
from functools import lru_cache

from aha.rewards.extract import tagged


def _words(text: str) -> int:
    return len(text.split())


def length_penalty(completion: str, sample: dict, limit_words: int, coef: float = 1.0) -> float:
    """A fixed length cost: -coef * min(words / limit_words, 1), in [-coef, 0]. Add it with a
    positive weight next to the correctness reward."""
    if limit_words <= 0:
        raise ValueError(f"limit_words must be positive, got {limit_words}")
    return -coef * min(_words(completion) / limit_words, 1.0)


@lru_cache(maxsize=None)
def _verifier(name: str):
    from aha.rewards.functions import resolve_function

    return resolve_function(name, key="reward.args.verifier")


def _verify(completion: str, sample: dict, verifier: str) -> float:
    return float(_verifier(verifier)(completion, sample))


def target_length_bonus(completion: str, sample: dict, target_words: int, bonus: float = 0.5,
                        verifier: str = "math_answer") -> float:
    """LASER-style step reward (Liu et al. 2025, arXiv:2505.15612): correctness plus a bonus
    only for a correct answer within target_words, so shortening never pays for a wrong one.
    reward = c + bonus * c * [words <= target_words], c from the verifier."""
    correct = _verify(completion, sample, verifier)
    return correct + bonus * correct * float(_words(completion) <= target_words)


_NUMBER = re.compile(r"^\s*(\d*\.?\d+)\s*(%?)\s*$")


def stated_confidence(completion: str, tag: str = "confidence") -> float | None:
    """The confidence in the last <confidence>...</confidence> span, as a probability:
    0.8, .8 or 80% -> 0.8. None when absent or outside [0, 1]."""
    span = tagged(completion, tag)
    match = _NUMBER.match(span) if span is not None else None
    if match is None:
        return None
    value = float(match.group(1)) / (100.0 if match.group(2) else 1.0)
    return value if 0.0 <= value <= 1.0 else None


def calibration_reward(completion: str, sample: dict, verifier: str = "math_answer", tag: str = "confidence") -> dict:
    """RLCR (Damani et al. 2025, arXiv:2507.16806): correctness plus a Brier score of the
    stated confidence q, reward = c - (q - c)^2. A missing or malformed confidence counts as
    q = 1 - c (the worst Brier score). Returns {correct, brier} so both are logged; their
    sum is the RLCR reward."""
    correct = _verify(completion, sample, verifier)
    q = stated_confidence(completion, tag)
    if q is None:
        q = 1.0 - correct
    return {"correct": correct, "brier": -((q - correct) ** 2)}
