"""A run folder knows what it is (config drift on resume), is held by one process at a time
(run.lock), and writes every crash and interrupt to log.txt."""

import json
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from test_training import metrics, tiny_config

from aha.config import ConfigError
from aha.tracking.run_lock import RunLocked
from aha.training.interrupt import TrainingInterrupted
from aha.training.loop import train

QUIET = lambda *_: None
FAST = ("train.steps=2", "eval.before=false", "eval.after=false")


def first_run(tmp_path, *extra):
    return train(tiny_config(tmp_path, "run", *FAST, *extra), echo=QUIET)


def test_config_drift_on_resume_is_refused_naming_keys_and_values(tmp_path):
    first_run(tmp_path)
    run = tmp_path / "run"
    config_before, metrics_before = (run / "config.yaml").read_text(), (run / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError) as err:
        train(tiny_config(tmp_path, "run", *FAST, "train.steps=3", "train.lr=1.0e-4", "rollout.temperature=0.7",
                          "reward=[{fn: exact_match}]"), echo=QUIET)
    message = str(err.value)
    assert "train.lr: 0.001 -> 0.0001" in message
    assert "rollout.temperature: 1.0 -> 0.7" in message
    assert "reward: [" in message and "exact_match" in message
    assert "train.steps" not in message  # extending a run is not a change of what is trained
    assert "new output_dir" in message and "train.allow_config_change=true" in message
    # nothing was touched
    assert (run / "config.yaml").read_text() == config_before
    assert (run / "metrics.jsonl").read_text() == metrics_before
    assert not (run / "config_history.jsonl").exists()


def test_extending_steps_and_bookkeeping_keys_resume_without_a_record(tmp_path):
    first_run(tmp_path)
    run = tmp_path / "run"
    lines = []
    train(tiny_config(tmp_path, "run", *FAST, "train.steps=3", "train.checkpoint_every=1", "train.log_samples=1",
                      "eval.after=true", "eval.limit=3"), echo=lines.append)
    assert any(line.startswith("note: eval.limit changed") for line in lines)  # allowed, but said
    assert [r["step"] for r in metrics(run) if "reward/mean" in r] == [1, 2, 3]
    assert not (run / "config_history.jsonl").exists()
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["steps"] == 3


def test_allow_config_change_continues_and_records_the_change(tmp_path):
    first_run(tmp_path)
    run = tmp_path / "run"
    lines = []
    train(tiny_config(tmp_path, "run", *FAST, "train.steps=3", "train.lr=1.0e-4", "train.allow_config_change=true"),
          echo=lines.append)
    history = [json.loads(line) for line in (run / "config_history.jsonl").read_text().splitlines()]
    assert history == [{"step": 3, "changes": {"train.lr": [0.001, 0.0001]}}]
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["lr"] == 1.0e-4
    assert any("config changed from step 3" in line for line in lines)
    # the new lr is the one used: the checkpoint's optimizer state did not bring the old one back
    blob = torch.load(run / "checkpoints/step-3/trainer.pt", weights_only=False)
    assert [g["lr"] for g in blob["optimizers"]["policy"]["param_groups"]] == [1.0e-4]
    assert [r["step"] for r in metrics(run) if "reward/mean" in r] == [1, 2, 3]
    # the recorded config now is the run's config: resuming with it again is no change
    train(tiny_config(tmp_path, "run", *FAST, "train.steps=3", "train.lr=1.0e-4"), echo=QUIET)
    assert len((run / "config_history.jsonl").read_text().splitlines()) == 1


@pytest.mark.parametrize("allow", ["false", "true"])
def test_a_different_model_is_refused_with_the_drift_message(tmp_path, allow):
    first_run(tmp_path)
    with pytest.raises(ConfigError) as err:
        train(tiny_config(tmp_path, "run", *FAST, "model=smollm2-135m", f"train.allow_config_change={allow}"),
              echo=QUIET)
    message = str(err.value)
    assert 'model: "tiny" -> "smollm2-135m"' in message
    assert "cannot change within a run" in message and "new output_dir" in message
    assert "size mismatch" not in message
    assert not (tmp_path / "run" / "config_history.jsonl").exists()


def write_lock(folder: Path, pid: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))


def test_a_run_folder_held_by_a_live_process_is_refused_at_once(tmp_path):
    first_run(tmp_path)
    run = tmp_path / "run"
    before = (run / "metrics.jsonl").read_text()
    holder = subprocess.Popen(["sleep", "60"])
    try:
        write_lock(run, holder.pid)
        with pytest.raises(RunLocked, match=f"PID {holder.pid}"):
            train(tiny_config(tmp_path, "run", *FAST, "train.steps=3"), echo=QUIET)
        assert json.loads((run / "run.lock").read_text())["pid"] == holder.pid  # the holder keeps its lock
        log_text = (run / "log.txt").read_text()
        assert f"process {os.getpid()}" in log_text and "was refused" in log_text
    finally:
        holder.kill()
        holder.wait()
    assert (run / "metrics.jsonl").read_text() == before


def test_a_stale_lock_is_taken_over_with_a_note_in_the_log(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_lock(tmp_path / "run", dead.pid)
    first_run(tmp_path)
    assert [r["step"] for r in metrics(tmp_path / "run") if "reward/mean" in r] == [1, 2]
    assert "took over a stale" in (tmp_path / "run/log.txt").read_text()
    assert str(dead.pid) in (tmp_path / "run/log.txt").read_text()
    assert not (tmp_path / "run/run.lock").exists()


def test_the_lock_is_held_during_the_run_and_gone_after_it_and_after_a_crash(tmp_path, monkeypatch):
    import aha.training.rl.method as rl

    real_step, seen = rl.run_step, []

    def step(parts, state, n, phases):
        seen.append(json.loads((Path(parts.config.output_dir) / "run.lock").read_text()))
        if n == 2 and len(seen) == 2 and crash:
            raise RuntimeError("boom in step 2")
        return real_step(parts, state, n, phases)

    monkeypatch.setattr(rl, "run_step", step)
    crash = False
    first_run(tmp_path)
    assert seen[0] == {"pid": os.getpid(), "host": socket.gethostname()}
    assert not (tmp_path / "run/run.lock").exists()
    crash, seen[:] = True, []
    with pytest.raises(RuntimeError, match="boom in step 2"):
        train(tiny_config(tmp_path, "other", *FAST), echo=QUIET)
    assert not (tmp_path / "other/run.lock").exists()
    log_text = (tmp_path / "other/log.txt").read_text()  # the crash is in the run's log, with its traceback
    assert "training stopped by an error" in log_text and "Traceback" in log_text and "boom in step 2" in log_text


def interrupt_at(monkeypatch, at: int, how):
    import aha.training.rl.method as rl

    real_step = rl.run_step

    def step(parts, state, n, phases):
        if n == at and how == "raise":  # as from a reward function, in the middle of the step
            raise KeyboardInterrupt
        record = real_step(parts, state, n, phases)
        if n == at:  # Ctrl-C while the step runs
            os.kill(os.getpid(), signal.SIGINT)
        return record

    monkeypatch.setattr(rl, "run_step", step)


def test_ctrl_c_finishes_the_step_saves_a_checkpoint_and_resumes_exactly(tmp_path, monkeypatch):
    straight = train(tiny_config(tmp_path, "straight", *FAST, "train.steps=4"), echo=QUIET)
    interrupt_at(monkeypatch, 3, "signal")
    lines = []
    with pytest.raises(TrainingInterrupted) as stop:
        train(tiny_config(tmp_path, "run", *FAST, "train.steps=4"), echo=lines.append)
    run = tmp_path / "run"
    assert stop.value.code == 130
    assert "after step 3" in str(stop.value) and "step-3 holds step 3" in str(stop.value)
    # the user's own file and overrides, so the command can be pasted as it is
    assert (f"aha train {tmp_path / 'run.yaml'} train.steps=2 eval.before=false eval.after=false train.steps=4 "
            "train.resume=true") in lines[-1]
    assert (run / "checkpoints/step-3").is_dir() and not (run / "run.lock").exists()
    log_text = (run / "log.txt").read_text()
    assert "training interrupted after step 3" in log_text and "KeyboardInterrupt" in log_text
    assert [r["step"] for r in metrics(run) if "reward/mean" in r] == [1, 2, 3]
    monkeypatch.undo()
    train(tiny_config(tmp_path, "run", *FAST, "train.steps=4"), echo=QUIET)
    a = load_file(Path(straight.run_dir) / "checkpoints/step-4/model.safetensors")
    b = load_file(run / "checkpoints/step-4/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs if "reward/mean" in r]
    assert strip(metrics(Path(straight.run_dir))) == strip(metrics(run))


def test_an_interrupt_inside_a_step_keeps_the_last_whole_checkpoint(tmp_path, monkeypatch):
    interrupt_at(monkeypatch, 3, "raise")
    lines = []
    with pytest.raises(TrainingInterrupted) as stop:
        train(tiny_config(tmp_path, "run", *FAST, "train.steps=4"), echo=lines.append)
    run = tmp_path / "run"
    assert stop.value.code == 130
    assert "during step 3" in str(stop.value) and "step-2 holds step 2" in str(stop.value)
    assert "train.resume=true" in lines[-1]
    # step 3 was cut short: its half-changed state is not saved as if it were whole
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2"]
    assert "KeyboardInterrupt" in (run / "log.txt").read_text() and not (run / "run.lock").exists()


def test_a_launch_that_fails_before_its_run_begins_leaves_no_folder(tmp_path):
    from aha.rewards import RewardError

    with pytest.raises(RewardError):
        train(tiny_config(tmp_path, "bad", *FAST, "reward=[{fn: 'no_such_module:score'}]"), echo=QUIET)
    assert not (tmp_path / "bad").exists()
    with pytest.raises(FileNotFoundError):
        train(tiny_config(tmp_path, "nomodel", *FAST, f"model={tmp_path / 'missing-model'}"), echo=QUIET)
    assert not (tmp_path / "nomodel").exists()
    # a folder that was there before is the user's: kept, with the error in its log
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine/notes.txt").write_text("keep me")
    with pytest.raises(RewardError):
        train(tiny_config(tmp_path, "mine", *FAST, "reward=[{fn: 'no_such_module:score'}]"), echo=QUIET)
    assert (tmp_path / "mine/notes.txt").read_text() == "keep me"
    assert "training stopped by an error" in (tmp_path / "mine/log.txt").read_text()


def test_a_checkpoint_holding_nan_is_refused_on_resume_naming_the_tensor(tmp_path):
    from safetensors.torch import save_file

    run = Path(first_run(tmp_path, "train.checkpoint_every=1", "train.keep_checkpoints=2").run_dir)
    path = run / "checkpoints/step-2/model.safetensors"
    weights = load_file(path)
    name = sorted(weights)[0]
    weights[name][0] = float("nan")
    save_file(weights, str(path), metadata={"format": "pt"})
    # as a run that let the NaN through would have written it: its manifest agrees with the file
    import hashlib
    import json

    manifest = json.loads((path.parent / "manifest.json").read_text())
    manifest["model.safetensors"] = {"bytes": path.stat().st_size,
                                     "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    (path.parent / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ConfigError) as err:
        train(tiny_config(tmp_path, "run", *FAST[1:], "train.steps=3", "train.checkpoint_every=1",
                          "train.keep_checkpoints=2"), echo=QUIET)
    message = str(err.value)
    # the file holds the tied embedding once (as lm_head); the model has it as embed_tokens and lm_head
    assert message.startswith(f"checkpoint {run / 'checkpoints/step-2'} holds NaN or inf in 2 tensors (first: "
                              "model.model.embed_tokens.weight)")
    assert name == "lm_head.weight"
    assert f"Delete it to resume from {run / 'checkpoints/step-1'}" in message
    assert [r["step"] for r in metrics(run) if "reward/mean" in r] == [1, 2]  # nothing of the refused resume written
