"""Rule-based verifiers for numeric answers, and a format reward."""

from __future__ import annotations

import math
import re

NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_NUMBER = re.compile(NUMBER)
# the completion ends with its answer: a number, optionally followed by a full stop
_ENDS_WITH_NUMBER = re.compile(NUMBER + r"\s*\.?\s*$")


def _to_float(text: str) -> float | None:
    try:
        return float(text.replace(",", "").strip())
    except ValueError:
        return None


def extract_answer(completion: str) -> float | None:
    """The final answer of a completion: the last \\boxed{...} if any, else the last number.

    Only the final answer counts, so a completion cannot score by mentioning the right
    number somewhere (e.g. by repeating an operand) and then concluding something else."""
    boxed = _BOXED.findall(completion)
    if boxed:
        return _to_float(boxed[-1])
    numbers = _NUMBER.findall(completion)
    return _to_float(numbers[-1]) if numbers else None


def numeric_answer(completion: str, sample: dict) -> float:
    """1.0 if the final answer equals sample['answer'] numerically, else 0.0."""
    reference = _to_float(str(sample["answer"]))
    if reference is None:
        raise ValueError(f"reference answer {sample['answer']!r} is not a number")
    predicted = extract_answer(completion)
    if predicted is None:
        return 0.0
    return 1.0 if math.isclose(predicted, reference, rel_tol=1e-9, abs_tol=1e-9) else 0.0


def format_reward(completion: str, sample: dict) -> float:
    """1.0 if the answer is given in the expected form: boxed, or a number closing the text."""
    text = completion.strip()
    return 1.0 if _BOXED.search(text) or _ENDS_WITH_NUMBER.search(text) else 0.0
