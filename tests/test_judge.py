"""The rubric judge: batched grading by a local model."""

import pytest

from aha.config import RewardSpec
from aha.rewards import build_reward
from aha.rewards.judge import answer_tokens, judge_model, parse_grade, rubric_judge

RUBRIC = "The response answers the question correctly, matching the reference answer."
PAIRS = [  # question, reference, right response, wrong or unrelated response
    ("What is the capital of France?", "Paris", "The capital of France is Paris.", "I like turtles and sunny days."),
    ("What is 12 times 3?", "36", "12 times 3 is 36.", "Bananas are yellow."),
    ("Name a primary color.", "red", "Red is a primary color.", "The weather is nice today."),
    ("How many legs does a spider have?", "8", "A spider has 8 legs.", "Spiders are scary I think maybe."),
    ("What is the boiling point of water in Celsius?", "100", "Water boils at 100 degrees Celsius.", "Water is wet."),
    ("Who wrote Romeo and Juliet?", "Shakespeare", "William Shakespeare wrote Romeo and Juliet.", "It was written by "
            "Charles Dickens."),
]


def _batch():
    completions, samples = [], []
    for question, answer, right, wrong in PAIRS:
        completions += [right, wrong]
        samples += [{"prompt": question, "answer": answer}] * 2
    return completions, samples


def test_parse_grade():
    assert parse_grade("7", 9) == pytest.approx(7 / 9)
    assert parse_grade(" 10/10 because", 10) == 1.0
    assert parse_grade("I would say 3.", 4) == 0.75
    assert parse_grade("twelve", 9) is None
    assert parse_grade("12", 9) is None


@pytest.mark.parametrize("mode", ["yes_no", "expected"])
def test_grades_do_not_depend_on_batching(mode):
    completions, samples = _batch()
    one = rubric_judge(completions, samples, rubric=RUBRIC, model="tiny", mode=mode, batch_size=1)
    many = rubric_judge(completions, samples, rubric=RUBRIC, model="tiny", mode=mode, batch_size=8)
    assert all(0.0 <= g <= 1.0 for g in one)
    assert many == pytest.approx(one, abs=1e-5)
    assert len(set(round(g, 6) for g in one)) > 1  # the grade reads the completion


def test_generate_mode_parses_or_fails_the_sample():
    completions, samples = _batch()
    grades = rubric_judge(completions[:4], samples[:4], rubric=RUBRIC, model="tiny", mode="generate", max_new_tokens=3)
    assert len(grades) == 4 and all(g is None or 0.0 <= g <= 1.0 for g in grades)


def test_bad_judge_settings_are_clear():
    with pytest.raises(ValueError, match="non-empty rubric"):
        rubric_judge(["x"], [{}], rubric=" ", model="tiny")
    with pytest.raises(ValueError, match="mode must be one of"):
        rubric_judge(["x"], [{}], rubric=RUBRIC, model="tiny", mode="vibes")
    with pytest.raises(ValueError, match="scale 12 out of range"):
        rubric_judge(["x"], [{}], rubric=RUBRIC, model="tiny", mode="expected", scale=12)
    with pytest.raises(Exception, match=r"reward\[0\].args: .*unexpected keyword argument 'rubrik'"):
        build_reward([RewardSpec(fn="rubric_judge", args={"rubric": RUBRIC, "rubrik": RUBRIC})])


def test_embedded_judge_prefers_right_answers():
    """Measured: the 135M model as a yes/no judge ranks the right response first in all six
    pairs (small margins); its digit grades do not discriminate (docs/rewards.md)."""
    completions, samples = _batch()
    reward = build_reward([RewardSpec(fn="rubric_judge", args={"rubric": RUBRIC}, name="judge")])
    grades = reward.score(completions, samples).components["judge"].tolist()
    right, wrong = grades[0::2], grades[1::2]
    assert sum(r > w for r, w in zip(right, wrong)) >= 5
    assert sum(right) / len(right) > sum(wrong) / len(wrong) + 0.03
    tokens, values = answer_tokens(judge_model("smollm2-135m").tokenizer, "yes_no", 9)
    assert len(tokens) == 2 and values == [1.0, 0.0]
