"""Verifiers on real and adversarial completions."""

import pytest

from aha.config import RewardSpec
from aha.rewards import (
    RewardError,
    build_reward,
    exact_match,
    math_answer,
    multiple_choice,
    numeric_answer,
    regex_match,
)
from aha.rewards.extract import answer_line, final_answer, last_boxed, tagged


def test_extraction_rules():
    assert last_boxed(r"so \boxed{3} then \boxed{\frac{1}{2}} done") == r"\frac{1}{2}"  # last, nested braces
    assert last_boxed(r"\boxed{unclosed") is None
    assert tagged("<think>2</think><answer> 42 </answer>") == "42"
    assert answer_line("work...\nThe answer is 17.\n") == "17"
    assert answer_line("Final answer: x = 3") == "x = 3"
    assert final_answer("no answer here") is None
    assert answer_line("I will answer: 5") == "5" and answer_line("to answer this we add") is None


@pytest.mark.parametrize("reference, completion", [
    ("1/2", r"Dividing, we get \boxed{0.5}"),
    ("1/2", r"\boxed{\frac{2}{4}}"),
    (r"\frac{\sqrt{2}}{2}", r"\boxed{\frac{1}{\sqrt{2}}}"),
    ("x+1", r"The answer is $1 + x$"),
    ("(1,2]", r"\boxed{(1, 2]}"),
    ("10\\%", r"\boxed{0.1}"),
    ("3", "<answer>3</answer>"),
    ("-7", "Final answer: -7"),
    ("1200", "The total is 1,200"),
])
def test_math_answer_accepts_equivalent_forms(reference, completion):
    assert math_answer(completion, {"answer": reference}) == 1.0


@pytest.mark.parametrize("reference, completion", [
    ("1/2", r"\boxed{0.51}"),
    ("x+1", r"\boxed{x-1}"),
    ("(1,2]", r"\boxed{[1,2]}"),
    ("2", "2, 3, 5, 7"),  # prints many numbers: only the last one counts
    ("3", r"First \boxed{3} in the reasoning, but finally \boxed{4}"),  # a box inside the reasoning
    ("3", "I don't know"),
])
def test_math_answer_rejects_wrong_or_hedged_answers(reference, completion):
    assert math_answer(completion, {"answer": reference}) == 0.0


def test_math_answer_rejects_an_unparseable_reference():
    for reference in ("}{", ""):
        with pytest.raises(ValueError, match="could not be parsed"):
            math_answer(r"\boxed{1}", {"answer": reference})


def test_numeric_answer_with_tolerance():
    assert numeric_answer("about 3.14", {"answer": "3.14159"}) == 0.0
    assert numeric_answer("about 3.14", {"answer": "3.14159"}, rel_tol=1e-3) == 1.0
    assert numeric_answer("so 102, or maybe 12", {"answer": "102"}) == 0.0  # last number counts


def test_multiple_choice():
    assert multiple_choice("The answer is (B).", {"answer": "B"}) == 1.0
    assert multiple_choice(r"A looks tempting but \boxed{C}", {"answer": "C"}) == 1.0
    assert multiple_choice("A or B? I pick D", {"answer": "B"}) == 0.0  # last standalone letter
    assert multiple_choice("I cannot decide", {"answer": "A"}) == 0.0


def test_exact_match_normalises_and_accepts_aliases():
    assert exact_match("Answer: The Eiffel Tower!", {"answer": "eiffel tower"}) == 1.0
    assert exact_match("Answer: Paris", {"answer": "x", "answers": ["Paris, France", "Paris"]}) == 1.0
    assert exact_match("Answer: Paris", {"answer": "paris"}, normalize=False) == 0.0


def test_regex_match_from_config_or_sample():
    assert regex_match("ID: AB-123", {"answer": ""}, pattern=r"[A-Z]{2}-\d{3}") == 1.0
    assert regex_match("ID: AB-123", {"answer": "", "pattern": r"^\d+$"}) == 0.0
    assert regex_match("12345", {"answer": ""}, pattern=r"\d+", full=True) == 1.0
    with pytest.raises(ValueError, match="regex_match needs a pattern"):
        regex_match("x", {"answer": ""})


def test_reward_args_come_from_the_config_and_are_checked():
    reward = build_reward([RewardSpec(fn="numeric_answer", args={"rel_tol": 0.01})])
    assert reward.score(["3.14"], [{"answer": "3.1416"}]).total.tolist() == [1.0]
    with pytest.raises(RewardError, match=r"reward\[0\].args: .*unexpected keyword argument 'tolerance'"):
        build_reward([RewardSpec(fn="numeric_answer", args={"tolerance": 0.01})])
