"""What keeps the text rewards fast on adversarial completions (issue 29).

A reward runs in the trainer's own process (reward.workers: 0, the default, has no timeout), so a
completion that makes one regular expression backtrack stalls the run: Python's re tries a
search at every position, and two runs that can split the same characters ("\\s*\\.?\\s*",
"\\s*(?:,|or)?\\s*") or a run the pattern fails after ("\\d+...$" searched along digits) cost the
square of a run of spaces or digits -- 10-27 s for a few hundred tokens. The reward modules keep
their patterns linear: possessive runs (*+, ++) where nothing could take characters back, a
lookbehind so a search enters a run once, "...$" read as a match on the reversed text, one search
per line. tests/test_regex_linear.py checks every pattern for these shapes. What cannot be made
linear is bounded here:

- math-verify (math_answer) backtracks on long inputs and its LaTeX parser is slow on nesting,
  so it never reads more than MAX_MATH_CHARS characters of a completion: a longer stated answer
  (a box, an <answer> span, a run of boxes) scores 0, and with no answer stated it reads only the
  completion's end (`math_tail`). Its sympy stage is bounded by math_answer's timeout_seconds.
- regex_match runs the config's own pattern, which aha cannot rewrite: it runs with the `regex`
  package (re's syntax) and a time limit, and a completion not decided within it scores 0."""

from __future__ import annotations

import re

MAX_MATH_CHARS = 500  # the longest final answer in math-verify's own test cases is 167 characters
PATTERN_TIMEOUT_S = 0.5  # regex_match's default time limit for one completion

# a number closing the text, matched on the text reversed: its end is the pattern's start
_REVERSED_NUMBER_CLOSE = re.compile(r"\s*+(?:\.\s*+)?\d")


def ends_with_number(text: str) -> bool:
    """True if the text ends with a number, then at most a full stop and spaces ("... is 12.").
    The same as searching for NUMBER + "\\s*\\.?\\s*$" (a number ends with a digit), but one match
    at the end instead of a search that runs along every digit run to its end."""
    return _REVERSED_NUMBER_CLOSE.match(text[::-1]) is not None


def math_tail(text: str) -> str:
    """What math-verify reads of a completion that states no answer: all of it up to
    MAX_MATH_CHARS characters, else its last lines within that many (else the last characters
    when the last line alone is longer)."""
    if len(text) <= MAX_MATH_CHARS:
        return text
    tail = text[-MAX_MATH_CHARS:]
    newline = tail.find("\n")
    return tail[newline + 1:] if 0 <= newline < len(tail) - 1 else tail


def pattern_matches(pattern: str, text: str, full: bool, timeout_s: float) -> bool:
    """regex_match's test: `pattern` found in `text` (full: matches all of it, "." matching newlines
    too), run by the `regex` package -- re's syntax, and a time limit: a pattern that backtracks
    (nested runs such as "(a+)+$") stops after timeout_s seconds and counts as no match."""
    import regex

    try:
        if full:
            return regex.fullmatch(pattern, text, flags=regex.DOTALL, timeout=timeout_s) is not None
        return regex.search(pattern, text, timeout=timeout_s) is not None
    except TimeoutError:
        return False
