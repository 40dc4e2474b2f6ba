"""Length and calibration shaping terms, by hand."""

import pytest

from aha.config import RewardSpec
from aha.rewards import build_reward, calibration_reward, length_penalty, stated_confidence, target_length_bonus


def test_length_penalty():
    assert length_penalty("a b c d", {}, limit_words=8) == pytest.approx(-0.5)
    assert length_penalty("a " * 20, {}, limit_words=8, coef=0.3) == pytest.approx(-0.3)  # capped
    with pytest.raises(ValueError, match="limit_words must be positive"):
        length_penalty("a", {}, limit_words=0)


def test_target_length_bonus_only_rewards_short_correct_answers():
    sample = {"answer": "12"}
    assert target_length_bonus(r"so \boxed{12}", sample, target_words=5) == 1.5  # correct, short
    assert target_length_bonus("well " * 10 + r"\boxed{12}", sample, target_words=5) == 1.0  # correct, long
    assert target_length_bonus(r"\boxed{13}", sample, target_words=5) == 0.0  # short but wrong: no bonus


@pytest.mark.parametrize("text, expected", [
    ("<confidence>0.8</confidence>", 0.8), ("<confidence> 80% </confidence>", 0.8),
    ("<confidence>.5</confidence>", 0.5), ("<confidence>1.7</confidence>", None), ("none", None),
])
def test_stated_confidence(text, expected):
    assert stated_confidence(text) == (pytest.approx(expected) if expected is not None else None)


def test_calibration_reward_is_correctness_plus_brier():
    sample = {"answer": "12"}
    right_sure = calibration_reward(r"\boxed{12} <confidence>0.9</confidence>", sample)
    assert right_sure == {"correct": 1.0, "brier": pytest.approx(-0.01)}
    wrong_sure = calibration_reward(r"\boxed{13} <confidence>0.9</confidence>", sample)
    assert wrong_sure == {"correct": 0.0, "brier": pytest.approx(-0.81)}
    wrong_humble = calibration_reward(r"\boxed{13} <confidence>0.1</confidence>", sample)
    assert wrong_humble["brier"] == pytest.approx(-0.01)  # honesty about a wrong answer pays
    assert calibration_reward(r"\boxed{12}", sample)["brier"] == -1.0  # no confidence: worst score
    # in a config: both parts are logged, their sum is the RLCR reward
    result = build_reward([RewardSpec(fn="calibration")]).score([r"\boxed{12} <confidence>0.9</confidence>"], [sample])
    assert set(result.components) == {"calibration/correct", "calibration/brier"}
    assert float(result.total[0]) == pytest.approx(0.99)


@pytest.mark.parametrize("completion, correct", [
    ("23 * 8 = 184. <confidence>0.7</confidence>", 1.0),  # numeric_answer alone would read 0.7 as the answer
    ("184\n<confidence>90%</confidence>", 1.0),
    ("23 * 8 = 186 <confidence>0.7</confidence>", 0.0),
    ("<confidence>0.7</confidence> 23 * 8 = 184", 1.0),
    ("23 * 8 = 184 <confidence>0.7", 1.0),  # never closed: no confidence stated, the answer still read
    ("23 * 8 = <confidence>184</confidence>", 0.0),  # a number inside the tag is a confidence, not the answer
])
def test_the_calibration_verifier_does_not_read_the_confidence_as_the_answer(completion, correct):
    got = calibration_reward(completion, {"answer": "184"}, verifier="numeric_answer")
    assert got["correct"] == correct


def test_a_stated_confidence_is_never_the_answer_nor_the_vote():
    """numeric_answer and majority voting read the last number: a confidence after the answer
    would be read as the answer (every answer wrong, and maj@k weighted by stated confidence
    voting on the confidences)."""
    from aha.eval.sampling import vote_key
    from aha.rewards import numeric_answer

    assert numeric_answer("23 * 8 = 184 <confidence>0.7</confidence>", {"answer": "184"}) == 1.0
    assert numeric_answer("23 * 8 = 184 <confidence>0.7</confidence>", {"answer": "0.7"}) == 0.0
    assert [vote_key(t) for t in ("184 <confidence>0.9</confidence>", "184.0 <confidence>30%</confidence>",
                                  "<confidence>0.5</confidence>")] == ["184", "184", None]
    assert vote_key("Answer: Paris <confidence>0.9</confidence>") == "Paris"  # a text answer too
