"""Red team: run.lock holders this process may not see (another user's live process, a lock
written without a host) and the held-out measures a resume names."""

import json
import os
import socket
import subprocess

import pytest

from aha.config import dump_config, load_config
from aha.tracking import run_lock
from aha.tracking.run_identity import resume_changes
from aha.tracking.run_lock import RunLock, RunLocked, pid_alive


def test_a_lock_of_another_users_live_process_is_refused(tmp_path, monkeypatch):
    """Catches pid_alive reading PermissionError (the process exists, owned by another user)
    as a dead process: its run folder would be taken over while it trains."""
    def kill(pid, sig):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(run_lock.os, "kill", kill)
    assert pid_alive(4242) is True
    (tmp_path / "run.lock").write_text(json.dumps({"pid": 4242, "host": socket.gethostname()}))
    lock = RunLock(tmp_path)
    with pytest.raises(RunLocked, match="in use by another training process .PID 4242"):
        lock.acquire()
    assert json.loads((tmp_path / "run.lock").read_text())["pid"] == 4242 and lock.stale is None


def test_a_dead_lock_without_a_host_is_taken_over(tmp_path):
    """Catches a lock that names no host (written by hand or by an older aha) read as another
    host's: the folder would stay locked forever."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / "run.lock").write_text(json.dumps({"pid": dead.pid}))
    lock = RunLock(tmp_path)
    lock.acquire()
    try:
        assert lock.stale == {"pid": dead.pid}
        assert json.loads((tmp_path / "run.lock").read_text()) == {"pid": os.getpid(), "host": socket.gethostname()}
    finally:
        lock.release()


def test_a_lock_of_another_host_is_refused(tmp_path):
    (tmp_path / "run.lock").write_text(json.dumps({"pid": 1, "host": socket.gethostname() + "-elsewhere"}))
    with pytest.raises(RunLocked, match="on another host"):
        RunLock(tmp_path).acquire()


BASE = ("model=tiny", "train.lr=0.001")


@pytest.mark.parametrize("override, key", [("eval.scorer=numeric_answer", "eval.scorer"),
                                           ("eval.correct_threshold=0.5", "eval.correct_threshold"),
                                           ("eval.max_new_tokens=9", "eval.max_new_tokens"),
                                           ("eval.limit=3", "eval.limit")])
def test_each_eval_key_that_changes_how_accuracy_is_measured_is_named(tmp_path, override, key):
    """Catches one of eval.scorer / correct_threshold / max_new_tokens / limit left out of the
    measures a resume names: accuracies before and after it would be compared as alike."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(dump_config(load_config(None, [*BASE, f"output_dir={run}"])))
    assert resume_changes(run, load_config(None, [*BASE, f"output_dir={run}", override])) == ({}, [key])
    assert resume_changes(run, load_config(None, [*BASE, f"output_dir={run}", "eval.every=3"])) == ({}, [])
