"""More text a reader never sees, or sees withdrawn (issue 29, kind 1; aha.rewards.visible): HTML that
is never rendered, struck-out text, markdown comments, xcolor's white!100 and \\mathcolor. Each
case scored 1 before: the boxed decoy after a visible answer won."""

import pytest

from aha.rewards import exact_match, math_answer, multiple_choice, numeric_answer
from aha.rewards.extract import strip_hidden

REWARDS = {  # reward, the answer it is asked for (hidden), the visible answer before it
    "math_answer": (math_answer, "42", "13"),
    "numeric_answer": (numeric_answer, "42", "13"),
    "multiple_choice": (multiple_choice, "B", "C"),
    "exact_match": (exact_match, "Paris", "London"),
}
HIDERS = [
    "<script>@</script>", "<style>@</style>", "<template>@</template>", "<title>@</title>",
    "<s>@</s>", "<strike>@</strike>", "<del>@</del>", " ~~@~~", r"\cancel{@}", r"\xcancel{@}", r"\sout{@}",
    "\n[//]: # (@)", "\n[comment]: <> (@)", "\n  [//]: # \"@\"",
    r"\textcolor{white!100}{@}", r"$\mathcolor{white}{@}$",
]


@pytest.mark.parametrize("hider", HIDERS)
@pytest.mark.parametrize("name", list(REWARDS))
def test_a_hidden_or_struck_out_answer_after_a_visible_one_scores_zero(name, hider):
    reward, hidden, shown = REWARDS[name]
    completion = rf"The answer is \boxed{{{shown}}}. " + hider.replace("@", rf"\boxed{{{hidden}}}")
    assert reward(completion, {"answer": hidden}) == 0.0
    assert reward(completion, {"answer": shown}) == 1.0  # the visible answer is the one read


@pytest.mark.parametrize("text, visible", [
    ("x~~=~~5", "x~~=~~5"),  # LaTeX spacing, not a strikethrough
    ("12~~cm", "12~~cm"),
    ("a ~~b~~ c", "a   c"),
    ("[1]: https://example.com", "[1]: https://example.com"),  # a real link definition is left alone
    ("[^1]: a footnote, shown", "[^1]: a footnote, shown"),
    ("4\u200b2 and Pa\u00adris", "42 and Paris"),  # zero-width characters: read as the reader sees
    (r"\textcolor{white!50!black}{7}", r"\textcolor{white!50!black}{7}"),  # grey is seen
])
def test_what_stays_visible(text, visible):
    assert strip_hidden(text) == visible


def test_zero_width_characters_inside_an_answer_read_as_shown():
    assert math_answer("\\boxed{4\u200b2}", {"answer": "42"}) == 1.0
    assert exact_match("The answer is Pa\u200bris.", {"answer": "Paris"}) == 1.0


@pytest.mark.parametrize("name", ["bleu", "chrf", "rouge_l"])
def test_reference_metrics_score_only_the_text_a_reader_sees(name):
    from aha.rewards import reference

    metric = getattr(reference, name)
    sample = {"answer": "the cat sat on the mat near the door"}
    shown = "a dog ran"
    hiders = ["<!-- @ -->", "<span hidden>@</span>", r"\textcolor{white}{@}",
              "<details><summary>x</summary>@</details>"]
    for hider in hiders:
        stuffed = shown + " " + hider.replace("@", sample["answer"])
        assert metric(stuffed, sample) == pytest.approx(metric(shown, sample), abs=0.01)
        assert metric(stuffed, sample) < 0.2  # the hidden reference scored > 0.5
    code = "```\nthe cat sat on the mat near the door\n```"
    assert metric(code, sample) > 0.5  # a code block is shown: it counts here


@pytest.mark.parametrize("completion", ["**Answer:** 42", "**Answer: 42**", "The answer is **42**.",
                                        "**Final answer:** 42", "Answer: __42__"])
def test_markdown_emphasis_around_an_answer_line_is_no_part_of_it(completion):
    """A false negative the red team found: math_answer read "** 42" and scored 0."""
    assert math_answer(completion, {"answer": "42"}) == 1.0
    assert math_answer(completion, {"answer": "43"}) == 0.0
    assert exact_match(completion, {"answer": "42"}) == 1.0
