"""Fault injection for the kill tests (tests/test_kill.py): AHA_KILL_AT=NAME:N makes this
process SIGKILL itself the N-th time it passes the point called NAME (a step's end, the
middle of a metrics line, a checkpoint half written, ...); NAME@R:N only the learner rank R
(torchrun's RANK). AHA_STALL_AT, with the same form, makes it stop there and wait forever, alive
(a rank hung in a driver or a deadlock). Unset, a point costs two dictionary lookups."""

from __future__ import annotations

import os
import signal
import time

_passed: dict[str, int] = {}


def _due(spec: str, name: str) -> bool:
    """Whether this pass of point `name` is the one spec (NAME[@RANK]:N) names."""
    target, _, count = spec.rpartition(":")
    target, _, rank = target.partition("@")
    return target == name and str(_passed[name]) == count and rank in ("", os.environ.get("RANK", "0"))


def kill_point(name: str) -> None:
    kill, stall = os.environ.get("AHA_KILL_AT"), os.environ.get("AHA_STALL_AT")
    if not (kill or stall):
        return
    _passed[name] = _passed.get(name, 0) + 1
    if kill and _due(kill, name):
        os.kill(os.getpid(), signal.SIGKILL)
    if stall and _due(stall, name):
        while True:
            time.sleep(60)
