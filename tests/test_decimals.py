"""math_answer reads a rounded decimal and a decimal-comma reference as Math-Verify's tests do
(aha.rewards.decimals), without letting a near miss through."""

import pytest

from aha.rewards import math_answer
from aha.rewards.decimals import decimal_comma_reading, written_decimals


@pytest.mark.parametrize("reference, completion, expected", [
    ("\\frac{1}{3}", "\\boxed{0.33}", 1.0),
    ("\\frac{1}{3}", "\\boxed{0.3333}", 1.0),
    ("\\frac{8}{3}", "The answer is 2.67.", 1.0),
    ("(\\frac{3}{5},\\frac{8}{3}]", "$(0.6,2.6667]$", 1.0),
    ("\\frac{1}{3}", "\\boxed{0.34}", 0.0),  # wrongly rounded
    ("\\frac{1}{3}", "\\boxed{0.3}", 0.0),  # one decimal is too few to read as rounded
    ("\\frac{2}{3}", "\\boxed{0.66}", 0.0),  # truncated, not rounded
    ("\\frac{1}{8}", "\\boxed{0.13}", 0.0),  # 0.125 has a finite decimal: matched exactly
    ("0.125", "\\boxed{0.13}", 0.0),  # a decimal reference is matched exactly
    ("\\sqrt{2}", "\\boxed{1.41}", 0.0),  # irrational: not read as rounded (as math-verify)
    ("\\frac{1}{3}", "\\boxed{(0.33, 0.5)}", 0.0),  # a tuple is not a number
])
def test_a_rounded_decimal_counts_only_for_a_fraction_with_no_finite_decimal(reference, completion, expected):
    assert math_answer(completion, {"answer": reference}) == expected


@pytest.mark.parametrize("reference, completion, expected", [
    ("1,22", "\\boxed{1.22}", 1.0),
    ("1,22", "\\boxed{1,22}", 1.0),  # still the list {1, 22}
    ("12,5", "12.5", 1.0),
    ("1,220", "\\boxed{1220}", 1.0),  # three digits: thousands, as before
    ("1,220", "\\boxed{1.22}", 0.0),
    ("1,22", "\\boxed{122}", 0.0),
    ("$1,22$", "\\boxed{1.22}", 0.0),  # LaTeX: the list, as math-verify reads it
])
def test_a_bare_decimal_comma_reference_is_read_both_ways(reference, completion, expected):
    assert math_answer(completion, {"answer": reference}) == expected


def test_helpers():
    assert written_decimals(["(0.6,2.6667]", "x"]) == 4 and written_decimals(["12"]) == 0
    assert decimal_comma_reading(" 1,22 ") == "1.22" and decimal_comma_reading("1,220") is None
    assert decimal_comma_reading("1,2,3") is None and decimal_comma_reading("-3,5") == "-3.5"


@pytest.mark.parametrize("reference, completion", [
    ("\\frac{1}{300}", "\\boxed{0.00}"),  # a rounding that keeps no digit of the value
    ("\\frac{1}{3000}", "\\boxed{0.000}"),
    ("\\sqrt[3]{2}", "\\boxed{1.26}"),  # a root is not a fraction
    ("\\frac{\\pi}{3}", "\\boxed{1.05}"),
])
def test_a_rounding_that_keeps_no_digit_or_of_a_root_does_not_count(reference, completion):
    assert math_answer(completion, {"answer": reference}) == 0.0


def test_a_small_fraction_rounded_to_two_significant_digits_counts():
    assert math_answer("\\boxed{0.0033}", {"answer": "\\frac{1}{300}"}) == 1.0
