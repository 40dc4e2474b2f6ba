"""math_answer on short answers that math-verify's parser or sympy would work on for seconds
(issue 29, kind 2: every text reward linear-time or bounded). They are refused before anything is
computed (aha.rewards.bounded): brackets nested deeper than MAX_MATH_DEPTH, and numbers that would
take more than MAX_ANSWER_DIGITS digits to write out (power towers, factorial chains, huge powers,
exp towers). Each case below took math-verify's full timeout_seconds (5 s) before; the bound is
checked by construction: the refusal happens before math-verify parses or verifies."""

import pytest

from aha.rewards import math_answer
from aha.rewards.bounded import MAX_ANSWER_DIGITS, MAX_MATH_DEPTH, bracket_depth, too_large

BOMBS = {
    "power tower": "The answer is \\boxed{" + "2^{" * 8 + "2" + "}" * 8 + "}",
    "factorial chain": "The answer is \\boxed{9!!!!!!}",
    "huge power": "The answer is \\boxed{99999^{99999999}}",
    "exp tower": "The answer is \\boxed{e^{e^{e^{e^{100}}}}}",
    "symbolic base, numeric tower": "\\boxed{x^{99999^{99999999}}}",
    "fractions 40 deep": "\\boxed{" + "\\frac{" * 40 + "1" + "}{2}" * 40 + "}",
    "parentheses 30 deep": "\\boxed{" + "(" * 30 + "1" + ")" * 30 + "}",
    "braces 16 deep": "\\boxed{" + "{" * 16 + "1" + "}" * 16 + "}",
    "tower in the last line, no box": "We get $2^{2^{2^{2^{2^{2^{2}}}}}}$",
    # chains without brackets: the bound is one walk of the tree (it was 2^n: 40 "!" ran for hours)
    "40 factorials, answer line": "The answer is 42" + "!" * 40,
    "40 factorials, boxed": "\\boxed{9" + "!" * 40 + "}",
    "unbraced tower of 60": "\\boxed{" + "2^" * 60 + "2}",
}


@pytest.mark.parametrize("completion", list(BOMBS.values()), ids=list(BOMBS))
def test_an_expression_bomb_is_refused_before_sympy_evaluates_it(completion, monkeypatch):
    import math_verify  # math_answer imports verify from it at each call

    verified = []

    def spy(gold, predicted, **kwargs):
        verified.append(predicted)
        return math_verify.verify(gold, predicted, **kwargs)

    monkeypatch.setattr(math_verify, "verify", spy)
    assert math_answer(completion, {"answer": "42"}) == 0.0
    assert verified == []  # refused before math-verify compared anything


@pytest.mark.parametrize("completion, reference", [
    ("\\boxed{2^{10}}", "1024"), ("\\boxed{2^{2^{2^{2}}}}", "65536"), ("\\boxed{10!}", "3628800"),
    ("\\boxed{e^{x^2}}", "e^{x^2}"), ("\\boxed{2^{100}}", "2^{100}"), ("\\boxed{10^{-5}}", "0.00001"),
    ("\\boxed{\\frac{\\frac{1}{2}}{\\frac{3}{4}}}", "\\frac{2}{3}"), ("\\boxed{e^{e}}", "e^{e}"),
    ("$\\left(\\frac{1}{2}, \\frac{\\sqrt{3}}{2}\\right)$", "(\\frac{1}{2}, \\frac{\\sqrt{3}}{2})"),
])
def test_real_answers_are_not_bombs(completion, reference):
    assert math_answer(completion, {"answer": reference}) == 1.0


def test_the_bounds():
    from sympy import Integer, Pow, Symbol, factorial

    assert (MAX_MATH_DEPTH, MAX_ANSWER_DIGITS) == (8, 100_000)
    assert bracket_depth("\\frac{\\sqrt{3}}{2}") == 2 and bracket_depth(")))(((") == 3
    two = Integer(2)
    tower = Pow(two, Pow(two, Pow(two, Pow(two, two, evaluate=False), evaluate=False), evaluate=False), evaluate=False)
    assert not too_large([tower])  # 2^65536: 19,729 digits
    assert too_large([Pow(two, tower, evaluate=False)])
    assert too_large([factorial(factorial(Integer(9), evaluate=False), evaluate=False)])
    assert not too_large([factorial(Integer(1000), evaluate=False), "1000!"])
    assert not too_large([Pow(Symbol("x"), Integer(10) ** 9, evaluate=False)])  # x^(10^9) stays symbolic
