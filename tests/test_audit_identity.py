"""Audit: which config keys a resume may change (tracking/run_identity.py), and run.lock files
torn mid-write (tracking/run_lock.py): young ones are being created, old ones are stale."""

import json
import os
import socket
import time

import pytest

from aha.config import ConfigError, dump_config, load_config
from aha.tracking.run_identity import resume_changes
from aha.tracking.run_lock import RunLock, RunLocked

BASE = ("model=tiny", "train.lr=0.001", "lora.rank=4", "lora.alpha=8")


def run_folder(tmp_path, *overrides):
    """A run folder whose config.yaml is BASE + overrides, as a run writes it."""
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "config.yaml").write_text(dump_config(load_config(None, [*BASE, f"output_dir={run}", *overrides])))
    return run


def resume(run, *overrides):
    return resume_changes(run, load_config(None, [*BASE, f"output_dir={run}", *overrides]))


# ---------------------------------------------------------------- run identity


@pytest.mark.parametrize("override", ["ray.rollout_workers=2", "ray.worker_threads=3", "ray.object_store_mb=512"])
def test_ray_keys_change_on_resume_without_any_flag(tmp_path, override):
    """Catches ray.* missing from the keys a resume may change: where the samples are drawn is
    not what is trained, so no train.allow_config_change is needed."""
    assert resume(run_folder(tmp_path), override) == ({}, [])


def test_bookkeeping_keys_and_eval_keys_change_without_a_flag_and_eval_measures_are_named(tmp_path):
    """Catches an allowed key (train.micro_batch_size, eval.*) treated as a change of what is
    trained, and an eval key that changes how accuracy is measured left out of the note."""
    run = run_folder(tmp_path)
    assert resume(run, "train.micro_batch_size=4", "train.steps=7") == ({}, [])
    assert resume(run, "eval.limit=3", "eval.every=5") == ({}, ["eval.limit"])


def test_lora_alpha_never_changes_even_with_allow_config_change(tmp_path):
    """Catches lora.alpha missing from the keys no flag may change (the adapters' scale belongs
    to the checkpoint), and allow_config_change overriding the NEVER keys."""
    run = run_folder(tmp_path)
    for allow in ("false", "true"):
        with pytest.raises(ConfigError) as err:
            resume(run, "lora.alpha=16", f"train.allow_config_change={allow}")
        message = str(err.value)
        assert "  lora.alpha: 8.0 -> 16.0\n" in message
        assert "lora.alpha cannot change within a run" in message
        assert "even with train.allow_config_change=true" in message
    with pytest.raises(ConfigError, match="lora.alpha cannot change within a run"):  # from its default, too
        resume(run_folder(tmp_path, "lora.alpha=null"), "train.allow_config_change=true")


def test_lora_dropout_is_not_a_never_key(tmp_path):
    """Catches the NEVER set grown to every lora.* key: dropout does not shape the weights."""
    changes, measured = resume(run_folder(tmp_path), "lora.dropout=0.1", "train.allow_config_change=true")
    assert changes == {"lora.dropout": [0.0, 0.1]} and measured == []


def test_train_lr_changes_only_with_allow_config_change(tmp_path):
    """Catches train.lr treated as bookkeeping (resumed silently) or refused even when allowed."""
    run = run_folder(tmp_path)
    with pytest.raises(ConfigError) as err:
        resume(run, "train.lr=0.0001")
    message = str(err.value)
    assert "  train.lr: 0.001 -> 0.0001\n" in message and "set train.allow_config_change=true" in message
    assert "cannot change within a run" not in message
    assert resume(run, "train.lr=0.0001", "train.allow_config_change=true") == ({"train.lr": [0.001, 0.0001]}, [])


# ---------------------------------------------------------------- torn run.lock files


def torn_lock(folder, age_s: float, text: str = '{"pid": 12') -> None:
    """A run.lock cut off mid-write, last modified age_s seconds ago."""
    path = folder / "run.lock"
    path.write_text(text)
    then = time.time() - age_s
    os.utime(path, (then, then))


@pytest.mark.parametrize("age_s, text", [(0.0, '{"pid": 12'), (9.0, '{"pid": 12'), (0.0, "")])
def test_a_torn_lock_younger_than_10_s_is_being_created(tmp_path, age_s, text):
    """Catches a torn lock file younger than 10 s taken over (its writer may be mid-write) or
    the JSON error escaping instead of RunLocked."""
    torn_lock(tmp_path, age_s, text)
    lock = RunLock(tmp_path)
    with pytest.raises(RunLocked, match=r"run.lock is being created by another training process; pick another "
                                        r"output_dir"):
        lock.acquire()
    assert (tmp_path / "run.lock").read_text() == text and lock.stale is None  # left to its writer


@pytest.mark.parametrize("age_s, text", [(11.0, '{"pid": 12'), (3600.0, ""), (11.0, "not json")])
def test_a_torn_lock_older_than_10_s_is_taken_over_as_stale(tmp_path, age_s, text):
    """Catches an old torn lock refused forever (or read as 'removed meanwhile', which keeps
    retrying and refuses): its writer died mid-write, so the folder is free."""
    torn_lock(tmp_path, age_s, text)
    lock = RunLock(tmp_path)
    lock.acquire()
    try:
        assert lock.stale == {}
        assert json.loads((tmp_path / "run.lock").read_text()) == {"pid": os.getpid(), "host": socket.gethostname()}
    finally:
        lock.release()
    assert not (tmp_path / "run.lock").exists()
