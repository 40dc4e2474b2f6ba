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
from aha.rewards.extract import (
    answer_line,
    answer_lines,
    boxes,
    final_answer,
    last_boxed,
    stated_answers,
    strip_hidden,
    strip_unit,
    tagged,
    to_float,
    unit_of,
    units_differ,
)


def test_extraction_rules():
    assert last_boxed(r"so \boxed{3} then \boxed{\frac{1}{2}} done") == r"\frac{1}{2}"  # last, nested braces
    assert last_boxed(r"\boxed{unclosed") is None and last_boxed(r"\boxed{\frac{1}{2}") is None
    assert tagged("<think>2</think><answer> 42 </answer>") == "42"
    assert answer_line("work...\nThe answer is 17.\n") == "17"
    assert answer_line("Final answer: x = 3") == "x = 3"
    assert final_answer("no answer here") is None
    assert answer_line("I will answer: 5") == "5" and answer_line("to answer this we add") is None


def test_the_last_stated_answer_wins_across_forms():
    assert final_answer(r"\boxed{3}. On reflection, the answer is 4.") == "4"
    assert final_answer(r"Answer: 4, or in a box \boxed{3}") == "3"
    assert final_answer("<answer>3</answer> wait, no: <answer>4") == "4"  # an unclosed tag runs to the end
    assert final_answer("Final Answer: The final answer is $5$. I hope it is correct.") == "$5$"  # the later anchor
    assert final_answer(r"3 \boxed{}") == ""  # an empty box is an empty answer, not a missing one
    assert [s.form for s in stated_answers(r"<answer>\boxed{1}</answer> Answer: 2")] == ["tag", "boxed", "line"]
    assert answer_lines("The answer isn't 5.")[0].negated and answer_lines("Answer: not 5")[0].negated
    assert [b.text for b in boxes(r"\boxed{1} \fbox{2} \boxed{3")] == ["1", "2", "3"]


def test_hidden_text_is_removed_before_extraction():
    assert strip_hidden("a <!-- b --> c <!-- d") == "a  c "
    assert strip_hidden("x\n% y\nz % w") == "x\n\nz "
    assert strip_hidden(r"12% and 12 % and 12\% stay; so does a closing $28$ %.") \
        == r"12% and 12 % and 12\% stay; so does a closing $28$ %."
    assert strip_hidden("a\n```python\nprint(1)\n```\nb ```c") == "a\n\nb "
    assert strip_hidden(r"a \iffalse b \fi c") == "a  c"


def test_units():
    assert [unit_of(t) for t in (r"12\text{ km}", "5 meters", r"90^\circ", r"3\ \mathrm{cm}^2", "7 inches",
                                 "2 boxes")] \
        == ["km", "m", "deg", "cm2", "in", "box"]
    assert [unit_of(t) for t in ("3x", "12", "12 or 13", r"2\pi", "12 percent")] == [None] * 5
    assert strip_unit("12 apples") == "12" and strip_unit("3x") == "3x"
    assert units_differ("12 km", r"12\text{ cm}") and not units_differ("12 km", "12")


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


def test_math_answer_compares_a_text_reference_as_text():
    reference = r"x = \frac{1}{2}, x = \frac{-1 \pm \sqrt{13}}{4}"  # math-verify keeps only the text
    assert math_answer(r"$$\boxed{x = \frac{1}{2},\ x = \frac{-1 \pm \sqrt{13}}{4}}$$", {"answer": reference}) == 1.0
    assert math_answer(r"\boxed{x = \frac{1}{2}}", {"answer": reference}) == 0.0
    assert math_answer(r"\boxed{1}", {"answer": "}{"}) == 0.0
    with pytest.raises(ValueError, match="could not be parsed"):
        math_answer(r"\boxed{1}", {"answer": ""})


def test_math_answer_rules_by_example():
    gold = {"answer": "12"}
    assert math_answer(r"\boxed{13} \boxed{12}", gold) == 0.0  # side by side: the set {12, 13}
    assert math_answer(r"\boxed{13}, \boxed{12}", {"answer": "12, 13"}) == 1.0  # ... which a set reference equals
    assert math_answer(r"Trying \boxed{13} fails, so the final answer is \boxed{12}", gold) == 1.0
    assert math_answer(r"3 * 4 = 12 \boxed{}", gold) == 0.0  # empty box: no fall back to the 12 before it
    assert math_answer(r"\boxed{13} <!-- \boxed{12} -->", gold) == 0.0
    assert math_answer("The answer is not 12.", gold) == 0.0
    assert math_answer(r"\boxed{12\%}", gold) == 0.0 and math_answer(r"\boxed{12\%}", {"answer": "0.12"}) == 1.0
    assert math_answer(r"\boxed{28}", {"answer": r"28\%"}) == 1.0  # a percentage reference takes the plain number
    assert math_answer(r"\boxed{12\text{ km}}", {"answer": "12 cm"}) == 0.0
    assert math_answer(r"\boxed{12\text{ km}}", gold) == 1.0  # a unit on one side only
    assert math_answer(r"it is worth $\boxed{\$16,\!386.20}$", {"answer": "16386.20"}) == 1.0
    assert math_answer(r"\boxed{12}. I checked: the answer is correct.", gold) == 1.0  # a line without math


def test_a_negation_refuses_only_an_answer_in_its_own_sentence():
    gold = {"answer": "12"}
    # an answer line without math states no answer, negated or not; nor does a negation in a later sentence
    assert math_answer("The answer is not obvious. We compute 3 * 4 = 12.", gold) == 1.0
    assert math_answer("The answer is obvious. We compute 3 * 4 = 12.", gold) == 1.0
    assert math_answer("We compute 3 * 4 = 12. The answer isn't hard to check.", gold) == 1.0
    assert math_answer(r"\boxed{12}. The answer is not in doubt.", gold) == 1.0
    assert math_answer("x = 12. Note this does not depend on y.", gold) == 1.0
    # a negation of the number itself still refuses it, with no fall back
    for refused in ("The answer is not 12.", "The answer isn't 12", "12 is not right", "It's not 12.",
                    "I computed 12, but that is not right.", "3 * 4 = 12. The answer is not 12."):
        assert math_answer(refused, gold) == 0.0, refused
    assert math_answer("Answer: not x", {"answer": "x"}) == 0.0 and math_answer("Answer: x", {"answer": "x"}) == 1.0


@pytest.mark.parametrize("reference, completion, score", [
    ("gif", "Answer: gif", 1.0),
    ("gif", r"\boxed{gif}", 1.0),
    ("gif", r"\boxed{\text{GIF}}", 1.0),
    ("Paris", "The capital of France... The answer is Paris.", 1.0),
    ("yes", "<answer>Yes</answer>", 1.0),
    ("Paris, France", "Answer: Paris, France", 1.0),
    ("gif", "Reversed:\ngif", 1.0),  # no stated answer: the last line, as text
    ("gif", r"\boxed{fig}", 0.0),  # as math, gif is the product g*i*f, equal to f*i*g
    ("gif", "Answer: fig", 0.0),
    ("gif", "gif backwards is fig", 0.0),
    ("gif", "The answer is not gif.", 0.0),
    ("yes", "Answer: yes. Or no.\nAnswer: no", 0.0),
    ("infinity", r"\boxed{\infty}", 1.0),  # a word math-verify reads as a constant stays math
    ("x", r"\boxed{x}", 1.0),  # a lone letter is a variable
])
def test_math_answer_compares_a_reference_without_math_as_text(reference, completion, score):
    assert math_answer(completion, {"answer": reference}) == score


def test_numeric_answer_reads_a_comma_only_as_a_thousands_separator():
    assert numeric_answer(r"\boxed{1,2}", {"answer": "12"}) == 0.0
    assert numeric_answer("candidates: 1,2,3", {"answer": "123"}) == 0.0
    assert numeric_answer(r"\boxed{1,234.5}", {"answer": "1234.5"}) == 1.0
    assert numeric_answer("The total is 1,000,000.", {"answer": "1000000"}) == 1.0
    assert numeric_answer("we get 12, then stop", {"answer": "12"}) == 1.0
    assert [to_float(t) for t in ("1,024", "-1,234.5", "12,34", "1,2345", "1234,567", "0,5", "1,,000")] \
        == [1024.0, -1234.5, None, None, None, None, None]


def test_numeric_answer_with_tolerance():
    assert numeric_answer("about 3.14", {"answer": "3.14159"}) == 0.0
    assert numeric_answer("about 3.14", {"answer": "3.14159"}, rel_tol=1e-3) == 1.0
    assert numeric_answer("so 102, or maybe 12", {"answer": "102"}) == 0.0  # last number counts
    assert numeric_answer(r"3 * 4 = 12 \boxed{}", {"answer": "12"}) == 0.0  # empty box: no fall back
    assert numeric_answer(r"\boxed{13} <!-- \boxed{12} -->", {"answer": "12"}) == 0.0  # comments removed


def test_multiple_choice():
    assert multiple_choice("The answer is (B).", {"answer": "B"}) == 1.0
    assert multiple_choice(r"A looks tempting but \boxed{C}", {"answer": "C"}) == 1.0
    assert multiple_choice("A or B? I pick D", {"answer": "B"}) == 0.0  # last standalone letter
    assert multiple_choice("I cannot decide", {"answer": "A"}) == 0.0


@pytest.mark.parametrize("hedge", ["A B C D", "A or B", "The answer is A or B.", "Answer: B, C", r"\boxed{A/B}",
                                   "It is (A) or (B)", "A and B", "Either B or C"])
def test_multiple_choice_hedges_score_zero_whichever_letter_is_right(hedge):
    assert all(multiple_choice(hedge, {"answer": letter}) == 0.0 for letter in "ABCD")


@pytest.mark.parametrize("text, letter", [("A or B? I pick D", "D"), ("The answer is (B).", "B"),
                                          ("A looks tempting, but C is right.", "C"), ("Answer: B", "B"),
                                          ("I think the answer is C", "C"), (r"not A, so \boxed{D}", "D")])
def test_multiple_choice_one_pick_after_weighing_options_still_counts(text, letter):
    assert multiple_choice(text, {"answer": letter}) == 1.0


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
