"""Find the final answer in a completion: the last \\boxed{...}, an "Answer:" line, a tagged
span, or the last number. Only the final answer counts, so a completion cannot score by
mentioning the right value on the way (repeating an operand, listing candidates) and then
concluding something else."""

from __future__ import annotations

import re

NUMBER = r"-?\d[\d,]*(?:\.\d+)?"
_NUMBER = re.compile(NUMBER)
_ANSWER_LINE = re.compile(r"\banswer\s*(?:is\b|:|=)\s*:?\s*(.+)", re.IGNORECASE)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), with nested braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, begin = 1, i
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i].strip()
        i += 1
    return None  # unbalanced: the box was never closed


def tagged(text: str, tag: str = "answer") -> str | None:
    """Content of the last <tag>...</tag> span."""
    found = re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.DOTALL)
    return found[-1].strip() if found else None


def answer_line(text: str) -> str | None:
    """What follows the last "Answer:" / "The answer is" / "Final answer:" on its line."""
    found = [m.group(1).strip() for line in text.splitlines() if (m := _ANSWER_LINE.search(line))]
    return found[-1].rstrip(".").strip() if found else None


def last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def final_answer(text: str) -> str | None:
    """The completion's final answer as text, by the first rule that finds one:
    last \\boxed{}, last <answer> span, last "Answer:" line. None if none is present."""
    for rule in (last_boxed, tagged, answer_line):
        found = rule(text)
        if found:
            return found
    return None


def to_float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.replace(",", "").replace("$", "").strip())
    except ValueError:
        return None
