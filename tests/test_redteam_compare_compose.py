"""Red team: pass@k curves that meet, and what the reward composition keeps of a sample whose
total overflowed or of a component that failed more than once."""

from aha.eval.compare import crossings
from aha.rewards.compose import Component, CompositeReward
from aha.rewards.functions import StepScores


def test_curves_that_meet_are_listed_where_they_meet():
    """Catches crossings missing the case where the difference reaches exactly 0: curves that
    touch (a = b at some k) after one led are reported between the two ks."""
    a = {"k": [1, 2, 4, 8], "mean": [0.5, 0.25, 0.125, 0.5]}
    b = {"k": [1, 2, 4, 8], "mean": [0.25, 0.25, 0.25, 0.25]}
    assert crossings(a, b) == [{"between_k": [1, 2], "before": 0.25, "after": 0.0},
                               {"between_k": [4, 8], "before": -0.125, "after": 0.25}]
    assert crossings(a, a) == []  # equal throughout: never crosses


def test_a_total_that_overflows_keeps_no_step_rewards():
    """Catches a sample whose total overflowed float32 (scored 0, failed) keeping the step
    rewards of its StepScores component: they would pay what the total no longer does."""
    def steps(completion, sample):
        return StepScores((2, 4), (1.0, 1.0))

    def scale(completion, sample):
        return 3.0e38 if completion == "huge" else 0.5

    reward = CompositeReward([Component("steps", steps), Component("scale", scale, combine="product")])
    result = reward.score(["huge"], [{"id": "0"}])
    assert result.total.tolist() == [0.0] and result.failed.tolist() == [True] and result.failures == {"total": 1}
    assert result.steps is None
    both = reward.score(["huge", "fine"], [{"id": "0"}, {"id": "1"}])
    assert both.total.tolist() == [0.0, 1.0]
    assert both.steps == [[], [(2, 0.5), (4, 0.5)]]


def test_first_errors_keep_each_components_first_error():
    """Catches first_errors overwritten by each later failure: the console and a stopped run
    must name the first sample a reward failed on."""
    def fails(completion, sample):
        raise ValueError(f"bad {completion}")

    reward = CompositeReward([Component("check", fails)])
    reward.score(["one", "two"], [{"id": "a"}, {"id": "b"}])
    reward.score(["three"], [{"id": "c"}])
    assert reward.first_errors == {"check": "on sample a: ValueError: bad one"}
