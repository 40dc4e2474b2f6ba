"""Fault injection for the kill tests (tests/test_kill.py): AHA_KILL_AT=NAME:N makes this
process SIGKILL itself the N-th time it passes the point called NAME (a step's end, the
middle of a metrics line, a checkpoint half written, ...); NAME@R:N only the learner rank R
(torchrun's RANK). Unset, a point costs one dictionary lookup."""

from __future__ import annotations

import os
import signal

_passed: dict[str, int] = {}


def kill_point(name: str) -> None:
    spec = os.environ.get("AHA_KILL_AT")
    if not spec:
        return
    _passed[name] = _passed.get(name, 0) + 1
    target, _, count = spec.rpartition(":")
    target, _, rank = target.partition("@")
    if target == name and str(_passed[name]) == count and rank in ("", os.environ.get("RANK", "0")):
        os.kill(os.getpid(), signal.SIGKILL)
