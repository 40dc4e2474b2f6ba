"""SIGTERM and SIGHUP (what SLURM, Kubernetes, `timeout` and a closed terminal send) stop a run as
Ctrl-C does: the step finishes, a checkpoint is saved, the console and log.txt say how to resume,
run.lock is released and the exit status is 128 + the signal. A run killed without a word
(SIGKILL, the OOM killer) is named as such by the next start of its folder."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_run_identity import FAST, QUIET, interrupt_at, write_lock
from test_training import metrics, tiny_config

from aha.cli.learners import wait_passing_signals
from aha.training.interrupt import TrainingInterrupted
from aha.training.loop import train

ROOT = Path(__file__).parent.parent


def signal_at(monkeypatch, at: int, signum: int):
    import aha.training.rl.method as rl

    real_step = rl.run_step

    def step(parts, state, n, phases):
        record = real_step(parts, state, n, phases)
        if n == at:  # the signal arrives while the step runs
            os.kill(os.getpid(), signum)
        return record

    monkeypatch.setattr(rl, "run_step", step)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_finish_the_step_save_and_say_how_to_resume(tmp_path, monkeypatch, signum):
    signal_at(monkeypatch, 2, signum)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    lines = []
    with pytest.raises(TrainingInterrupted) as stop:
        train(tiny_config(tmp_path, "run", *FAST, "train.steps=4"), echo=lines.append)
    run = tmp_path / "run"
    assert stop.value.code == 128 + signum
    assert any(line.strip().startswith(f"{signal.Signals(signum).name}: finishing this step") for line in lines)
    assert "after step 2" in lines[-1] and "step-2 holds step 2" in lines[-1] and "train.resume=true" in lines[-1]
    assert (run / "checkpoints/step-2").is_dir() and not (run / "run.lock").exists()
    assert "training interrupted after step 2" in (run / "log.txt").read_text()
    assert [r["step"] for r in metrics(run) if "reward/mean" in r] == [1, 2]
    # the handlers are the ones before the run: a library leaves no signal handler behind
    assert {s: signal.getsignal(s) for s in handlers} == handlers


def test_a_second_signal_stops_at_once(tmp_path, monkeypatch):
    import aha.training.rl.method as rl

    real_step = rl.run_step

    def step(parts, state, n, phases):
        if n == 2:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            os.kill(os.getpid(), signal.SIGTERM)  # the step never finishes
            time.sleep(5)
        return real_step(parts, state, n, phases)

    monkeypatch.setattr(rl, "run_step", step)
    with pytest.raises(TrainingInterrupted) as stop:
        train(tiny_config(tmp_path, "run", *FAST, "train.steps=4", "train.checkpoint_every=1"), echo=QUIET)
    assert stop.value.code == 128 + signal.SIGTERM and "during step 2" in str(stop.value)
    assert sorted(p.name for p in (tmp_path / "run/checkpoints").iterdir()) == ["step-1"]


def test_a_config_without_a_file_resumes_from_the_runs_own_config(tmp_path, monkeypatch):
    from aha.config import load_config

    interrupt_at(monkeypatch, 1, "signal")
    config = load_config(None, ["model=tiny", f"output_dir={tmp_path / 'run'}", *FAST, "train.resume=false"])
    with pytest.raises(TrainingInterrupted) as stop:
        train(config, echo=QUIET)
    assert f"aha train {tmp_path / 'run/config.yaml'} train.resume=true" in str(stop.value)


def aha_train(folder: Path, *extra: str, env_extra=None) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env_extra or {})}
    command = [sys.executable, "-m", "aha.cli", "train", str(ROOT / "configs/quickstart.yaml"), "model=tiny",
               "rollout.max_new_tokens=4", "eval.limit=2", "eval.max_new_tokens=4", "train.report=false",
               f"output_dir={folder}", *extra]
    return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(condition, process, seconds=120.0):
    end = time.time() + seconds
    while not condition():
        assert process.poll() is None, process.stdout.read()
        assert time.time() < end, "timed out"
        time.sleep(0.05)


def test_sigterm_to_aha_train_saves_and_exits_143(tmp_path):
    """The command a scheduler stops: after a step has been logged, one SIGTERM."""
    run = tmp_path / "run"
    process = aha_train(run, "train.steps=100000", "eval.before=false", "eval.after=false")
    wait_for(lambda: (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 1,
             process)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, output
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    saved = sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").iterdir())
    assert saved == [steps[-1]] and "SIGTERM: finishing this step" in output
    assert f"step-{steps[-1]} holds step {steps[-1]}" in output and "train.resume=true" in output
    assert "training interrupted" in (run / "log.txt").read_text() and not (run / "run.lock").exists()


def test_sighup_while_loading_or_evaluating_stops_at_once_with_the_message(tmp_path):
    """Outside the steps (here the held-out evaluation before training) a signal stops at once."""
    run = tmp_path / "run"
    process = aha_train(run, "train.steps=2", "eval.before=true", env_extra={"AHA_STALL_AT": "eval-samples:1"})
    wait_for(lambda: (run / "samples.jsonl").exists(), process)  # then it stalls, inside the evaluation
    process.send_signal(signal.SIGHUP)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGHUP, output
    assert "no checkpoint was written yet" in output and "training interrupted" in (run / "log.txt").read_text()
    assert not (run / "run.lock").exists()


def test_the_next_start_says_the_previous_process_died_without_a_word(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    write_lock(tmp_path / "run", dead.pid)
    lines = []
    train(tiny_config(tmp_path, "run", *FAST), echo=lines.append)
    said = [line for line in lines if "ended without a word" in line]
    assert len(said) == 1 and f"PID {dead.pid}" in said[0] and "out-of-memory killer" in said[0]


def test_the_torchrun_launcher_passes_sigterm_on_and_keeps_its_child_on_ctrl_c():
    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
                              "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                              "print('ready', flush=True)\ntime.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"

    def signals():
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)  # not passed on, and the child is not killed for it
        time.sleep(0.3)
        assert child.poll() is None
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=signals)
    thread.start()
    assert wait_passing_signals(child) == (7, signal.SIGINT)  # its status, and the first stop signal
    thread.join()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_the_process_was_told_to_ignore_stays_ignored():
    """`nohup aha train` ignores SIGHUP: the run must not start heeding it."""
    from aha.training.interrupt import DeferredInterrupt, StopSignals

    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopSignals(), DeferredInterrupt(QUIET):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_stop_signal_inside_a_reward_is_not_the_rewards_failure():
    """A reward contains its own failures (KeyboardInterrupt too), but not SIGTERM stopping the run."""
    from aha.errors import SignalStop
    from aha.rewards.calls import call_guarded

    def reward():
        raise SignalStop(signal.SIGTERM)

    with pytest.raises(SignalStop):
        call_guarded(reward)
    assert call_guarded(lambda: (_ for _ in ()).throw(KeyboardInterrupt())).error is not None


def test_sigterm_to_aha_train_on_two_ranks_saves_and_exits_143(tmp_path):
    run = tmp_path / "run"
    process = aha_train(run, "train.steps=100000", "eval.before=false", "eval.after=false",
                        "distributed.processes=2")
    wait_for(lambda: (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count("\n") >= 1,
             process, seconds=240)
    process.send_signal(signal.SIGTERM)  # to the launcher alone, as `timeout` or Kubernetes send it
    output, _ = process.communicate(timeout=180)
    assert process.returncode == 128 + signal.SIGTERM, output
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").iterdir()) == [steps[-1]]
    assert "AttributeError" not in output and "train.resume=true" in output and not (run / "run.lock").exists()
