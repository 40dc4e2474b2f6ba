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

import math
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


# ---- math_answer's expression bombs: short answers that math-verify's parser or sympy works on for
# seconds ("\frac" or braces nested 16 deep, 2^{2^{2^{2^{2^2}}}}, 9!!!!!!, 99999^{99999999})
MAX_MATH_DEPTH = 8  # brackets nested in an answer; real answers stay far below (\frac{\sqrt{3}}{2} is 2)
MAX_ANSWER_DIGITS = 100_000  # a number sympy would have to write out with more digits is no answer
_OPENERS, _CLOSERS = "({[", ")}]"


def bracket_depth(text: str) -> int:
    """How deep brackets ( { [ nest in text (one linear scan; an unmatched closer counts as none)."""
    depth = deepest = 0
    for char in text:
        if char in _OPENERS:
            depth += 1
            deepest = max(deepest, depth)
        elif char in _CLOSERS:
            depth = max(depth - 1, 0)
    return deepest


def _log10(n: int) -> float:
    """log10 of a positive integer (0 for 0), exact enough, without a float overflow."""
    return 0.0 if n == 0 else math.log10(n) if n.bit_length() < 1000 else n.bit_length() * math.log10(2)


def _digits_bound(expr) -> float:
    """An upper bound on log10 of the numbers sympy computes to evaluate expr (their digits), from its
    (unevaluated) tree alone: a power, exp or factorial of a numeric argument is bounded through
    that argument's bound, so a tower is refused before anything is computed. A part with a free
    symbol stays symbolic: sympy evaluates only its numeric subtrees."""
    from sympy import Basic, Float, Function, Pow, Rational, exp, factorial, factorial2

    if not isinstance(expr, Basic):  # a mutable matrix: its entries
        return max((_digits_bound(e) for e in getattr(expr, "values", lambda: [])()), default=0.0)
    if isinstance(expr, Rational):  # log10 of its numerator or denominator, the larger
        return max(_log10(abs(int(expr.p))), _log10(int(expr.q)))
    if isinstance(expr, Float):
        return abs(float(expr._mpf_[2] + expr._mpf_[3])) * 0.30103 if expr._mpf_[1] else 0.0
    bounds = [_digits_bound(a) for a in expr.args]  # once each: a chain (9!!!!...) is walked once, not 2^n times
    inner = max(bounds, default=1.0)
    if expr.free_symbols or not (isinstance(expr, (Pow, exp, factorial, factorial2)) or
                                 (isinstance(expr, Function) and expr.func.__name__ == "gamma")):
        return inner  # sums, products, sets, other functions: no larger than their numbers (to a few digits)
    power = bounds[-1]  # the exponent (of a power), the argument (of exp and factorial)
    if power > 7:  # an exponent or factorial argument of over ten million
        return math.inf
    if isinstance(expr, Pow):  # log10(b^e) = e log10(b), e < 10^power
        return 10 ** power * max(bounds[0], 0.0)
    if isinstance(expr, exp):  # log10(e^x) = x log10(e)
        return 10 ** power * math.log10(math.e)
    return 10 ** power * max(power, 0.5)  # log10(n!) < n log10(n), n < 10^power


def too_large(values: list) -> bool:
    """True if evaluating one of math-verify's parsed values would make sympy write out a number of
    more than MAX_ANSWER_DIGITS digits (see _digits_bound); math_answer scores it 0 unverified."""
    return any(_digits_bound(v) > MAX_ANSWER_DIGITS for v in values if not isinstance(v, str))
