"""Loud failures: a reward that fails on most samples stops the run before its update; one
that fails now and then, or steps that train nothing, are said on the console and in the
report; train.max_idle_steps stops a run that trains nothing."""


import pytest
from test_training import metrics, tiny_config

from aha.rewards import RewardFailureError
from aha.training.alarms import Alarms, check_reward_failures
from aha.training.loop import train

QUIET = lambda *_: None


def record(step, failed, sampled, **per_component):
    return {"step": step, "reward/mean": 0.0, "reward/failed": failed, "reward/failed_frac": failed / sampled,
            **{f"reward_failed/{k}": v for k, v in per_component.items()}}


def test_a_failure_rate_above_the_limit_stops_with_the_component_and_its_first_error():
    first = {"score": "on sample s3: TypeError: score() takes 1 positional argument but 2 were given"}
    with pytest.raises(RewardFailureError) as err:
        check_reward_failures(record(5, 48, 48, score=48), 0.5, first, 5)
    message = str(err.value)
    assert message.startswith("step 5: the reward failed on 48 of 48 samples (100%), more than "
                              "train.max_reward_failure_rate=0.5")
    assert "score on 48 of 48 samples (first error on sample s3: TypeError: score() takes 1" in message
    assert "before this step's update" in message and "train.max_reward_failure_rate=1.0" in message


def test_a_failure_rate_at_the_limit_or_below_goes_on():
    check_reward_failures(record(1, 24, 48, score=24), 0.5, {}, 1)  # 50% is not more than 0.5
    check_reward_failures(record(1, 0, 48), 0.0, {}, 1)
    with pytest.raises(RewardFailureError):
        check_reward_failures(record(1, 1, 48, score=1), 0.0, {}, 1)  # 0.0: any failure stops


def test_the_console_is_told_once_and_the_summary_counts_every_step():
    said = []
    alarms = Alarms(max_idle_steps=None)
    alarms.observe({**record(1, 2, 8, judge=2), "train/nothing_to_train": 0.0}, {"judge": "on sample a: timed out"},
                   said.append)
    alarms.observe({**record(2, 3, 8, judge=3), "train/nothing_to_train": 1.0}, {}, said.append)
    alarms.observe({**record(3, 0, 8), "train/nothing_to_train": 1.0}, {}, said.append)
    assert said[0] == ("warning: step 1: the reward failed on judge on 2 of 8 samples (first error on sample a: timed "
                       "out); "
                       "those samples score 0 (log.txt has each; the report counts them)")
    assert said[1].startswith("warning: step 2 had nothing to train on")
    assert len(said) == 2  # each kind of warning once; the rest is in the summary
    assert alarms.summary() == [
        "warning: the reward failed in 2 of 3 steps (judge on 5 samples); those samples scored 0",
        "warning: 2 of 3 steps had nothing to train on (every advantage zero)"]


def test_max_idle_steps_counts_consecutive_steps_only():
    alarms = Alarms(max_idle_steps=2)
    idle = lambda step, flag: {**record(step, 0, 8), "train/nothing_to_train": float(flag)}
    alarms.observe(idle(1, 1), {}, QUIET)
    alarms.observe(idle(2, 0), {}, QUIET)  # a step that trained resets the streak
    alarms.observe(idle(3, 1), {}, QUIET)
    with pytest.raises(RewardFailureError, match=r"step 4: 2 steps in a row had nothing to train on "
                                                 r"\(train.max_idle_steps=2\)"):
        alarms.observe(idle(4, 1), {}, QUIET)


# -- in a run --------------------------------------------------------------------------

def test_a_reward_failing_on_every_sample_stops_the_run_before_any_update(tmp_path):
    (tmp_path / "wrong.py").write_text("def score(completion):\n    return 1.0\n")  # wrong signature
    config = tiny_config(tmp_path, "broken", f"reward=[{{fn: '{tmp_path / 'wrong.py'}:score'}}]", "train.steps=3",
                         "eval.before=false", "eval.after=false")
    with pytest.raises(RewardFailureError) as err:
        train(config, echo=QUIET)
    assert str(err.value).startswith("step 1: the reward failed on 12 of 12 samples (100%)")
    assert "score on 12 of 12 samples (first error on sample" in str(err.value)
    run = tmp_path / "broken"
    assert not (run / "checkpoints").exists() or not list((run / "checkpoints").iterdir())
    assert not [r for r in metrics(run) if "loss/total" in r] if (run / "metrics.jsonl").exists() else True
    log = (run / "log.txt").read_text()
    assert "RewardFailureError: step 1: the reward failed" in log


def test_occasional_failures_and_idle_steps_are_on_the_console_and_in_the_report(tmp_path):
    # fails on completions that start with an even character code, constant otherwise: no
    # group ever has a spread of rewards, so no step trains
    (tmp_path / "flaky.py").write_text(
        "def score(completion, sample):\n"
        "    if ord(completion[:1] or ' ') % 2 == 0:\n"
        "        raise RuntimeError('judge unreachable')\n"
        "    return 1.0\n")
    said = []
    config = tiny_config(tmp_path, "flaky", f"reward=[{{fn: '{tmp_path / 'flaky.py'}:score'}}]", "train.steps=2",
                         "train.max_reward_failure_rate=1.0", "eval.before=false", "eval.after=false",
                         "train.report=true")
    train(config, echo=said.append)
    records = [r for r in metrics(tmp_path / "flaky") if "reward/mean" in r]
    failed = sum(r["reward/failed"] for r in records)
    assert failed > 0, "the planted reward should fail on some samples"
    assert any(line.startswith("warning: step ") and "judge unreachable" in line for line in said)
    steps_failed = sum(1 for r in records if r["reward/failed"])
    assert f"warning: the reward failed in {steps_failed} of 2 steps (score on {failed} samples)" in "\n".join(said)
    page = (tmp_path / "flaky/report.html").read_text()
    assert "<h2>Warnings</h2>" in page and f"score: {failed} samples" in page
    idle = sum(1 for r in records if r["train/nothing_to_train"])
    if idle:  # every group flat (failures score 0, the rest 1): only when some group has no failure and no success mix
        assert "nothing to train on" in page


def test_a_constant_reward_trains_nothing_and_max_idle_steps_stops_it(tmp_path):
    (tmp_path / "flat.py").write_text("def score(completion, sample):\n    return 0.0\n")
    said = []
    config = tiny_config(tmp_path, "flat", f"reward=[{{fn: '{tmp_path / 'flat.py'}:score'}}]", "train.steps=5",
                         "train.max_idle_steps=2", "eval.before=false", "eval.after=false")
    with pytest.raises(RewardFailureError, match=r"step 2: 2 steps in a row had nothing to train on"):
        train(config, echo=said.append)
    assert any(line.startswith("warning: step 1 had nothing to train on") for line in said)
    records = metrics(tmp_path / "flat")
    assert [r["train/nothing_to_train"] for r in records if "reward/mean" in r] == [1.0, 1.0]


def test_with_dynamic_sampling_a_flat_step_keeps_no_group_and_is_idle(tmp_path):
    (tmp_path / "flat.py").write_text("def score(completion, sample):\n    return 1.0\n")
    said = []
    config = tiny_config(tmp_path, "flat", f"reward=[{{fn: '{tmp_path / 'flat.py'}:score'}}]", "train.steps=2",
                         "algorithm.dynamic_sampling=true", "algorithm.max_rounds=2", "eval.before=false",
                         "eval.after=false", "train.report=true")
    train(config, echo=said.append)
    records = [r for r in metrics(tmp_path / "flat") if "reward/mean" in r]
    assert [(r["groups/trained"], r["train/nothing_to_train"]) for r in records] == [(0, 1.0), (0, 1.0)]
    assert not any("loss/total" in r for r in records)
    assert "warning: 2 of 2 steps had nothing to train on (every advantage zero)" in said
    assert "nothing to train on</b> in 2 of 2 steps" in (tmp_path / "flat/report.html").read_text()


def test_the_report_labels_correct_frac_by_its_threshold(tmp_path):
    from aha.tracking.plots import labels

    assert labels({"algorithm": {"length_correct_min": 0.5}})["reward/correct_frac"] == \
        "share of training samples with reward total >= 0.5"
    assert labels({})["reward/correct_frac"] == "share of training samples with reward total >= 1"
