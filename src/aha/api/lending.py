"""The Python rewards handed to aha.train: reward specs for the config, and the objects without an
importable name lent to rewards/functions.py's in-process lookup (python:<name>) for one call."""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Callable

from aha.rewards.functions import IN_PROCESS, in_process


def _reward_name(fn) -> str:
    """A reward's short name in metrics: the function's or the class's."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name if name.isidentifier() else "reward"


def _importable(fn) -> str | None:
    """'module:function' where that names fn itself (a module-level function of an importable
    module), so worker processes and a later `aha train` find it too; else None."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "." in qualname or "<" in qualname:
        return None
    try:
        return f"{module}:{qualname}" if getattr(importlib.import_module(module), qualname, None) is fn else None
    except ImportError:
        return None


@contextmanager
def python_rewards(raw: dict, reward, echo):
    """Put reward (see train) into raw as reward specs; the Python objects without an importable
    name are lent to this process's reward lookup for the call, and run in this process (a note
    says so where a spec asked for worker processes). Yields what it lent, by name."""
    lent: dict[str, Callable] = {}
    try:
        if reward is not None:
            raw["reward"] = [_reward_spec(item, lent, echo) for item in
                             (reward if isinstance(reward, (list, tuple)) else [reward])]
        yield lent
    finally:
        for name in lent:
            in_process.pop(name, None)


def _reward_spec(item, lent: dict, echo) -> dict:
    spec = dict(item) if isinstance(item, dict) else {"fn": item}
    fn = spec["fn"]
    if isinstance(fn, type):  # a class: one object of it, made with no arguments
        fn = fn()
    if callable(fn):
        spec.setdefault("name", _reward_name(fn))
        spec["fn"] = _importable(fn) or _lend(fn, spec["name"], lent)
        if spec["fn"].startswith(IN_PROCESS) and spec.get("workers"):
            echo(f"note: reward {spec['name']!r} has no importable name (a lambda, or defined in a notebook or "
                 f"__main__): it runs in this process, not in {spec['workers']} worker processes")
            spec["workers"] = 0
    return spec


@contextmanager
def lent_again(rewards: dict[str, Callable]):
    """A finished run's Python rewards, lent again for an evaluation of it."""
    taken = [name for name in rewards if name not in in_process]
    in_process.update({name: rewards[name] for name in taken})
    try:
        yield
    finally:
        for name in taken:
            in_process.pop(name, None)


def _lend(fn, name: str, lent: dict) -> str:
    key, n = f"{IN_PROCESS}{name}", 1
    while key in in_process:  # two rewards of one name, or a call within a call
        n += 1
        key = f"{IN_PROCESS}{name}#{n}"
    in_process[key] = lent[key] = fn
    return key
