"""The learner ranks as Ray actors (ray.learner_workers=2, a local Ray cluster aha starts): the
tiny RL run takes the steps one process takes, and a rank killed in the middle of a step stops
the run naming it, after which the same command resumes to the straight run's result."""

import json

import pytest
from distributed_runs import aha_train, assert_same_checkpoint, assert_same_run, trained, write_rl_config

pytest.importorskip("ray", reason="Ray learner ranks need ray (pip install 'aha[ray]')")


def test_two_ray_learner_ranks_take_the_steps_one_process_takes_and_survive_a_killed_rank(tmp_path):
    config = write_rl_config(tmp_path)
    one = trained(config, tmp_path / "one")
    two = trained(config, tmp_path / "two", "ray.learner_workers=2")
    assert_same_run(one, two, ["loss/total", "kl/ref", "grad_norm"])
    assert_same_checkpoint(tmp_path / "one/checkpoints/step-3", tmp_path / "two/checkpoints/step-3")

    run = tmp_path / "killed"
    killed = aha_train(config, run, "ray.learner_workers=2", env={"AHA_KILL_AT": "update@1:2"})
    assert killed.returncode == 2
    failure = "aha: error: learner rank 1 of 2 (a Ray actor) failed: ActorDiedError"
    assert failure in killed.stderr, killed.stderr[-3000:]
    assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())] == [0, 1]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-1"]
    resumed = trained(config, run, "ray.learner_workers=2", "train.resume=true")
    assert_same_run(one, resumed, ["loss/total"])
    assert_same_checkpoint(tmp_path / "one/checkpoints/step-3", run / "checkpoints/step-3")


def test_torchrun_ranks_and_ray_ranks_are_one_choice():
    from aha.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="distributed.processes and ray.learner_workers both start learner ranks"):
        load_config(None, ["distributed.processes=2", "ray.learner_workers=2"])
