"""The Python rewards handed to aha.train: reward specs for the config, and the objects without an
importable name lent to rewards/functions.py's lookup (python:<name>) for one call. The names are
the call's own: two calls (one within the other, or in two threads) each have their table, so the
same call again names its rewards alike and can resume its run."""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from typing import Callable

from aha.rewards.functions import IN_PROCESS, lending


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
    name are lent to the reward lookup for the call, and run in this process (a note says so where
    a spec asked for worker processes). Yields what it lent, by name."""
    lent: dict[str, Callable] = {}
    if reward is not None:
        named: set[str] = set()
        raw["reward"] = [_reward_spec(item, lent, named, echo) for item in
                         (reward if isinstance(reward, (list, tuple)) else [reward])]
    with lending(lent):
        yield lent


def _reward_spec(item, lent: dict, named: set, echo) -> dict:
    """One reward component's spec; named: the component names the call gave so far (a second
    'reward' is 'reward_2', in metrics and in its python: name)."""
    spec = dict(item) if isinstance(item, dict) else {"fn": item}
    fn = spec.get("fn")  # a reward model ({"model": ...}) is a spec as it is
    if isinstance(fn, type):  # a class: one object of it, made with no arguments
        fn = fn()
    if callable(fn):
        if "name" not in spec:
            spec["name"] = _unused(_reward_name(fn), named)
        spec["fn"] = _importable(fn) or _lend(fn, spec["name"], lent)
        if spec["fn"].startswith(IN_PROCESS) and spec.get("workers"):
            echo(f"note: reward {spec['name']!r} has no importable name (a lambda, or defined in a notebook or "
                 f"__main__): it runs in this process, not in {spec['workers']} worker processes")
            spec["workers"] = 0
    if spec.get("name"):
        named.add(spec["name"])
    return spec


def _unused(name: str, taken: set) -> str:
    """name, or name_2, name_3, ... the first not in taken."""
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}_{n}"
    return candidate


@contextmanager
def lent_again(rewards: dict[str, Callable]):
    """A finished run's Python rewards, lent again for an evaluation of it."""
    with lending(rewards):
        yield


def _lend(fn, name: str, lent: dict) -> str:
    """python:<name>, the name fn is lent by in this call (python:<name>_2, ... where another object
    of this call has that name)."""
    key = f"{IN_PROCESS}{name}"
    if lent.get(key, fn) is not fn:
        key = IN_PROCESS + _unused(name, {k.removeprefix(IN_PROCESS) for k in lent})
    lent[key] = fn
    return key
