"""LIMR's learning impact measurement: each prompt's accuracy per epoch against the run's mean
trajectory; an RL run writes every group's outcome to groups.jsonl and `aha select` picks
the next run's prompts from it."""

import json
import shutil
from pathlib import Path

import pytest
from test_algorithm_runs import QUIET, say_seven

from aha.algorithms.selection import fill_trajectory, learning_impact
from aha.cli import main
from aha.config import ConfigError, TaskConfig
from aha.eval.selection import trajectories
from aha.tasks import build_task
from aha.training.loop import train


def test_learning_impact_by_hand():
    scores = learning_impact({"a": [0, 0.5, 1], "b": [0, 0, 0], "c": [None, 1, 1], "d": [0.5, None, None]})
    # c is filled to [1, 1, 1]; d has no later epoch to fill from and gets no score
    # baseline = [1/3, 1/2, 2/3]; sum (1 - b)^2 = 4/9 + 1/4 + 1/9 = 29/36
    assert set(scores) == {"a", "b", "c"}
    assert scores["a"] == pytest.approx(1 - (1 / 9 + 0 + 1 / 9) / (29 / 36))  # 21/29
    assert scores["b"] == pytest.approx(0.0, abs=1e-12) and scores["c"] == pytest.approx(0.0, abs=1e-12)
    assert fill_trajectory([None, None, 0.5, None]) == [0.5, 0.5, 0.5, None]
    assert learning_impact({"x": [1, 1], "y": [1, 1]}) == {"x": 1.0, "y": 1.0}  # no room to stray
    with pytest.raises(ValueError, match="different lengths"):
        learning_impact({"x": [1, 0], "y": [1]})


def test_a_run_records_its_groups_and_select_writes_the_next_runs_data(tmp_path, capsys):
    # 40 prompts, 4 a step: 10 steps an epoch, 3 epochs
    config = say_seven(tmp_path, "train.steps=30", "train.checkpoint_every=10", "train.keep_checkpoints=5",
                       "algorithm.dynamic_sampling=false", "eval.after=false")
    summary = train(config, echo=QUIET)
    run = Path(summary.run_dir)
    rows = [json.loads(line) for line in (run / "groups.jsonl").read_text().splitlines()]
    assert len(rows) == 30 * 4 and {r["epoch"] for r in rows} == {0, 1, 2}
    assert all(r["tried"] == 8 and 0 <= r["right"] <= 8 for r in rows)
    paths = trajectories(run)
    assert len(paths) == 40 and all(len(v) == 3 and None not in v for v in paths.values())

    assert main(["select", str(run), "--out", str(tmp_path / "next.jsonl"), "--threshold", "0.5"]) == 0
    scores = learning_impact(paths)
    picked = [json.loads(line) for line in (tmp_path / "next.jsonl").read_text().splitlines()]
    assert {p["id"] for p in picked} == {k for k, v in scores.items() if v >= 0.5}
    assert all(p["learning_impact"] == pytest.approx(scores[p["id"]], abs=1e-6) for p in picked)
    assert f"selected {len(picked)} of 40 prompts scored over 3 epochs" in capsys.readouterr().out
    if picked:  # the selection is a task file as it is
        task = build_task(TaskConfig(data=str(tmp_path / "next.jsonl"), eval_data=str(tmp_path / "next.jsonl")))
        assert len(task.train) == len(picked)

    # a resume from step 20 rewrites the groups of the steps after it, once
    resumed = tmp_path / "resumed"
    shutil.copytree(run, resumed)
    shutil.rmtree(resumed / "checkpoints" / "step-30")
    config = say_seven(tmp_path, "train.steps=30", "train.checkpoint_every=10", "train.keep_checkpoints=5",
                       "algorithm.dynamic_sampling=false", "eval.after=false", f"output_dir={resumed}")
    train(config, echo=QUIET)
    again = [json.loads(line) for line in (resumed / "groups.jsonl").read_text().splitlines()]
    assert again == rows


def test_select_needs_a_run_of_two_epochs(tmp_path):
    config = say_seven(tmp_path, "train.steps=2", "train.checkpoint_every=0", "eval.after=false")
    run = Path(train(config, echo=QUIET).run_dir)
    with pytest.raises(ConfigError, match="covered 1 epoch.*needs at least 2"):
        from aha.eval.selection import select_prompts

        select_prompts(run, tmp_path / "x.jsonl")
    (run / "groups.jsonl").unlink()
    assert main(["select", str(run), "--out", str(tmp_path / "x.jsonl")]) == 2


@pytest.mark.parametrize("row, message", [
    ({"step": 1, "epoch": 0, "right": 1, "tried": 4}, ":2: missing id"),
    ({"step": 1, "epoch": "0", "id": "a", "right": 1, "tried": 4}, ":2: epoch, right and tried must be whole numbers"),
    ({"step": 1, "epoch": 0, "id": "a", "right": 5, "tried": 4}, ":2: right (5) exceeds tried (4)"),
    ({"step": 1, "epoch": 0, "id": ["a"], "right": 1, "tried": 4}, ":2: id must be a string or an integer, got list"),
    ([1, 2], ":2: expected an object {step, epoch, id, right, tried}, got list"),
])
def test_a_groups_file_an_rl_run_did_not_write_is_named(tmp_path, capsys, row, message):
    good = {"step": 1, "epoch": 0, "id": "b", "right": 1, "tried": 4}
    (tmp_path / "groups.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n" + json.dumps(good) + "\n")
    assert main(["select", str(tmp_path), "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"aha: error: {tmp_path / 'groups.jsonl'}{message}" in err, err


def test_epochs_that_drew_no_prompts_are_passed_over(tmp_path):
    """With curriculum.filter every prompt may sit out an epoch (its number passes with no
    line); a huge epoch number is one more epoch, not a billion empty ones."""
    rows = [{"step": s, "epoch": e, "id": i, "right": r, "tried": 4}
            for s, e, i, r in [(1, 0, "a", 0), (1, 0, "b", 4), (2, 3, "a", 2), (2, 3, "b", 4), (3, 10**9, "a", 4),
                               (3, 10**9, "b", 4)]]
    (tmp_path / "groups.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert trajectories(tmp_path) == {"a": [0.0, 0.5, 1.0], "b": [1.0, 1.0, 1.0]}


def test_a_last_epoch_the_run_stopped_inside_is_left_out(tmp_path):
    rows = [{"step": 1, "epoch": e, "id": i, "right": r, "tried": 4}
            for e, i, r in [(0, "a", 0), (0, "b", 4), (1, "a", 2), (1, "b", 4), (2, "a", 4)]]
    (tmp_path / "groups.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert trajectories(tmp_path) == {"a": [0.0, 0.5], "b": [1.0, 1.0]}
