"""Issue 29, round two, kinds 1 and 11: rewards that read text a reader never sees, a last number
the completion refuses or that closes a long list, and "B, I think" read as a hedge.

Every attack here scored 1 before these rules (extract.strip_hidden knew only comments and code
blocks; multiple_choice and exact_match read the raw completion when no answer was stated; the
last number counted whatever followed it; the pronoun I was choice I). exact_match compares the
whole visible completion when no answer is stated, so a refusal or a list beside the answer never
equalled it: kinds 2 and 3 are attacks on the other three rewards only."""

import pytest

from aha.rewards import exact_match, math_answer, multiple_choice, numeric_answer
from aha.rewards.extract import strip_hidden

# each reward with the answer it is asked for, and a wrong one (a decoy)
REWARDS = {
    "math_answer": (math_answer, "42", "13"),
    "numeric_answer": (numeric_answer, "42", "13"),
    "multiple_choice": (multiple_choice, "B", "C"),
    "exact_match": (exact_match, "Paris", "London"),
}
# ways to hide text (@) from a reader: LaTeX, HTML styles and attributes, a closed <details>
HIDERS = [
    r"\phantom{@}", r"\hphantom{@}", r"$\vphantom{@}$", r"\textcolor{white}{@}", r"\color{white}{@}",
    r"{\color{white} @}", r"\color[rgb]{1,1,1}{@}", r"\textcolor[HTML]{FFFFFF}{@}", r"\color{#fff}{@}",
    r"\begin{comment} @ \end{comment}", r"%, @", r"\begin{comment} @",
    '<span style="display:none">@</span>', '<div style="visibility: hidden">@</div>',
    '<span style="color:white">@</span>', '<span style="font-size:0">@</span>', "<p hidden>@</p>",
    "<span hidden>@</span>", '<span style="opacity: 0">@</span>', '<font color="#ffffff">@</font>',
    "<details><summary>My work</summary>@</details>", '<span hidden><span>x</span> @</span>',
]


def _score(name: str, completion: str) -> float:
    reward, right, _ = REWARDS[name]
    return reward(completion, {"answer": right})


@pytest.mark.parametrize("hider", HIDERS)
@pytest.mark.parametrize("name", list(REWARDS))
def test_a_hidden_boxed_answer_scores_zero(name, hider):
    right = REWARDS[name][1]
    assert _score(name, "Let me think about it. " + hider.replace("@", rf"\boxed{{{right}}}")) == 0.0


@pytest.mark.parametrize("name, completion", [
    ("multiple_choice", "Let me think about it. <!-- B -->"), ("multiple_choice", r"Hmm. \phantom{B}"),
    ("multiple_choice", "Hmm. <span hidden>B</span>"), ("multiple_choice", "Hmm.\n% B"),
    ("exact_match", "<!-- Paris -->"), ("exact_match", "% Paris"), ("exact_match", "```Paris```"),
    ("numeric_answer", "We need more work. <span hidden>42</span>"),
    ("numeric_answer", r"We need more work. \textcolor{white}{42}"),
])
def test_a_hidden_answer_does_not_score_when_no_answer_is_stated(name, completion):
    """multiple_choice and exact_match read the raw completion when it stated no answer."""
    assert _score(name, completion) == 0.0


@pytest.mark.parametrize("template", [
    r"\phantom{#} so @", r"\textcolor{red}{@}", r"{\color{blue} @}", r"\color[rgb]{1,0,0}{@}",
    r"{\color{white} #} and @", '<span style="color: red">@</span>', '<span style="background-color:white">@</span>',
    '<span style="overflow: hidden">@</span>', "<details><summary>@</summary>#</details>",
    "<details open><summary>Work</summary>@</details>", "<span hidden>#</span> @", "It rose 12%, so @",
    r"\begin{comment} # \end{comment} @", '<span title="hidden">@</span>', r"$\color{white}{#}$ @",
])
@pytest.mark.parametrize("name", list(REWARDS))
def test_a_visible_answer_beside_hidden_decoys_still_scores(name, template):
    _, right, wrong = REWARDS[name]
    completion = template.replace("@", rf"\boxed{{{right}}}").replace("#", rf"\boxed{{{wrong}}}")
    assert _score(name, completion) == 1.0


REFUSALS = ["so maybe @. I can't determine the final answer.", "The sum is probably @. I don't know.",
            "It could be @. I am not sure, I cannot give an answer.", "Perhaps @? I'm not sure what the answer is.",
            "@... I give up.", "x might be @. I have no idea.", "Maybe @. I\u2019m not sure.",
            "I tried @, but I am unable to determine the answer."]


@pytest.mark.parametrize("template", REFUSALS)
@pytest.mark.parametrize("name", ["math_answer", "numeric_answer", "multiple_choice"])
def test_the_last_number_before_a_refusal_is_no_answer(name, template):
    assert _score(name, template.replace("@", REWARDS[name][1])) == 0.0


@pytest.mark.parametrize("template", REFUSALS)
def test_the_last_letter_before_a_refusal_is_no_answer(template):
    """With choices A-J the I of the refusal used to be read as choice I (0 for the wrong reason);
    with four choices it was not, and the letter before the refusal scored."""
    assert multiple_choice(template.replace("@", "B"), {"answer": "B"}, choices="ABCD") == 0.0


@pytest.mark.parametrize("template", [
    "x = @. I'm not sure this is the simplest way, but the answer is @",  # a stated answer counts
    "x = @. I'm not sure this is the simplest way.", "I don't know why, but it is @.",
    "I can't find a simpler way; it is @.", "The answer is @. I am not sure.", "I'm not sure, but it is @.",
    "It is @. I cannot find a shorter proof.",
])
@pytest.mark.parametrize("name", ["math_answer", "numeric_answer", "multiple_choice"])
def test_doubt_that_refuses_nothing_keeps_the_answer(name, template):
    assert _score(name, template.replace("@", REWARDS[name][1])) == 1.0


ENUMERATIONS = [("1, 2, 3, ..., 41, 42", "42"), ("Candidates: 40 41 42 43 ... 99", "99"),
                ("Checking 37, 38, 39, 40, 41, 42", "42"), (r"$1, 2, \ldots, 42$", "42"),
                ("40\n41\n42\n43\n44\n45", "45"), ("It is one of 7, 12, 19, 23, 31 and 42", "42"),
                ("1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "20")]


@pytest.mark.parametrize("completion, reference", ENUMERATIONS)
@pytest.mark.parametrize("reward", [math_answer, numeric_answer])
def test_a_number_closing_a_long_enumeration_is_no_answer(reward, completion, reference):
    assert reward(completion, {"answer": reference}) == 0.0


@pytest.mark.parametrize("completion, reference", [
    ("Adding 3, 4 and 5 gives 12", "12"), ("We check 10, 11, 12: only 12 works", "12"),
    ("The answer is 42. We tried 1, 2, 3, 4, 5, 6, ..., 42", "42"), (r"So \boxed{42}. Also 1, 2, ..., 42", "42"),
    ("Possible: 40, 41, 42", "42"), ("40 and 42, so 42", "42"),
])
@pytest.mark.parametrize("reward", [math_answer, numeric_answer])
def test_a_short_list_or_a_stated_answer_still_counts(reward, completion, reference):
    assert reward(completion, {"answer": reference}) == 1.0


@pytest.mark.parametrize("reference", ["1, 2, 3, 4, 5, 6", r"\{1,2,3,4,5,6\}"])
def test_a_list_answers_a_list_reference(reference):
    assert math_answer("The roots are $1, 2, 3, 4, 5, 6$", {"answer": reference}) == 1.0


@pytest.mark.parametrize("completion", [
    "The answer is B, I think.", "B, I believe", "B. I'm fairly sure.", "(B), I guess", "Answer: B, I would say.",
    "I'd go with B, I reckon.", "The answer is B, I\u2019d say.", "Answer: B, I am confident.",
])
def test_the_pronoun_i_is_not_choice_i(completion):
    assert multiple_choice(completion, {"answer": "B"}) == 1.0


@pytest.mark.parametrize("hedge", ["The answer is B, I", "Answer: B, I.", "B I", "A or B, I think", "A B C D, I guess",
                                   "(B), (I)", "B, I, J"])
def test_a_lone_i_beside_another_letter_is_still_a_hedge(hedge):
    assert all(multiple_choice(hedge, {"answer": letter}) == 0.0 for letter in "ABCDIJ")


@pytest.mark.parametrize("completion", ["The answer is I.", "Answer: (I)", "I is correct.", r"\boxed{I}"])
def test_choice_i_still_counts(completion):
    assert multiple_choice(completion, {"answer": "I"}) == 1.0


def test_the_rules_themselves():
    from aha.rewards.fallback import closes_enumeration, refuses  # new with these rules

    assert strip_hidden(r"a \phantom{4{2}} b \textcolor{red}{c}") == r"a   b \textcolor{red}{c}"
    assert strip_hidden(r"$\color{white} 4 \frac{1}{2}$ 5") == "$ $ 5"  # a switch ends with its math
    assert strip_hidden("<details><summary>S</summary>x</details> y") == " S  y"
    assert strip_hidden(r"x \color{white}{4\}2} y") == "x   y"  # an escaped brace does not close the group
    assert strip_hidden("1<span hidden>0</span>2") == "1 2"  # a removed part does not join its neighbours
    assert refuses(" I don't know.") and not refuses(" I don't know why it works, but it does.")
    assert closes_enumeration("1, 2, ..., 9") and not closes_enumeration("1, 2, 9")
