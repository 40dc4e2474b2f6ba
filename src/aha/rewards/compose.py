"""Weighted composition of reward functions, with a per-component breakdown and error isolation."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from aha.config import RewardSpec

log = logging.getLogger(__name__)

RewardFn = Callable[[str, dict], "float | dict[str, float]"]
SHORT_NAMES = {
    "numeric_answer": "aha.rewards:numeric_answer",
    "math_answer": "aha.rewards:math_answer",
    "multiple_choice": "aha.rewards:multiple_choice",
    "exact_match": "aha.rewards:exact_match",
    "regex_match": "aha.rewards:regex_match",
    "format": "aha.rewards:format_reward",
    "think_answer_format": "aha.rewards:think_answer_format",
    "json_format": "aha.rewards:json_format",
    "length_limit": "aha.rewards:length_limit",
    "bleu": "aha.rewards:bleu",
    "chrf": "aha.rewards:chrf",
    "rouge_l": "aha.rewards:rouge_l",
    "length_penalty": "aha.rewards:length_penalty",
    "target_length_bonus": "aha.rewards:target_length_bonus",
    "calibration": "aha.rewards:calibration_reward",
}


class RewardError(ValueError):
    """A reward spec that cannot be used; the message names the config key."""


@dataclass
class RewardResult:
    total: torch.Tensor  # (N,) weighted sum of components
    components: dict[str, torch.Tensor]  # name -> (N,) unweighted values
    failed: torch.Tensor  # (N,) bool: some component raised on this sample


def _import_module(module: str, base_dir: Path):
    if module.endswith(".py"):
        path = Path(module)
        if not path.is_absolute() and not path.exists():
            path = base_dir / path
        if not path.is_file():
            raise FileNotFoundError(f"no such file: {path}")
        name = f"aha_user_{path.stem}_{abs(hash(str(path.resolve())))}"
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod
    # a plain module name is looked up next to the config too, then on sys.path
    if str(base_dir) not in sys.path and (base_dir / (module.split(".")[0] + ".py")).exists():
        sys.path.insert(0, str(base_dir))
    return importlib.import_module(module)


def resolve_function(path: str, key: str = "reward.fn", base_dir: str | Path = ".") -> Callable:
    """'module:function' or 'file.py:function' -> the callable; errors name the config key."""
    path = SHORT_NAMES.get(path, path)
    module, sep, attr = path.rpartition(":")
    if not sep or not module or not attr:
        raise RewardError(f"{key}: {path!r} must be 'module:function' or 'path/to/file.py:function'")
    try:
        mod = _import_module(module, Path(base_dir))
    except Exception as err:  # noqa: BLE001 - any import failure is reported the same way
        raise RewardError(f"{key}: cannot import {module!r}: {type(err).__name__}: {err}") from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise RewardError(f"{key}: module {module!r} has no function {attr!r}")
    return fn


class CompositeReward:
    """Combine reward functions; each is logged as its own component (unweighted).

    total = (sum over "sum" functions of weight * value)
            * (product over "product" functions of value)
            * (product over "gate" functions of [value >= gate_min]).
    A gate ("format must pass before correctness counts") zeroes the total when it fails.
    A dict-valued function adds one component per key; in a product or gate its parts are
    summed first.

    A function that raises scores that sample 0 for its component (so a raising gate
    closes) and marks it failed; the error is logged once per (function, sample id) and
    the run goes on."""

    def __init__(self, fns: list[tuple[str, RewardFn, float]], combine: list[tuple[str, float]] | None = None):
        self.fns = fns
        self.combine = combine or [("sum", 1.0)] * len(fns)  # (mode, gate_min) per function
        self._reported: set[tuple[str, str]] = set()

    def score(self, completions: list[str], samples: list[dict]) -> RewardResult:
        n = len(completions)
        summed = torch.zeros(n)
        factor = torch.ones(n)
        failed = torch.zeros(n, dtype=torch.bool)
        components: dict[str, torch.Tensor] = {}
        for (name, fn, weight), (mode, gate_min) in zip(self.fns, self.combine):
            for i, (completion, sample) in enumerate(zip(completions, samples)):
                try:
                    value = fn(completion, sample)
                    parts = {f"{name}/{k}": float(v) for k, v in value.items()} if isinstance(value, dict) else {name: float(value)}
                except Exception as err:  # noqa: BLE001 - a user reward must not stop the run
                    self._report(name, sample, err)
                    failed[i] = True
                    parts = {}
                for part, v in parts.items():
                    components.setdefault(part, torch.zeros(n))[i] = v
                value = sum(parts.values()) if parts else 0.0
                if mode == "sum":
                    summed[i] += weight * value
                elif mode == "product":
                    factor[i] *= value
                else:  # gate
                    factor[i] *= float(bool(parts) and value >= gate_min)
        return RewardResult(summed * factor, components, failed)

    def _report(self, name: str, sample: dict, err: Exception) -> None:
        sample_id = str(sample.get("id", "?"))
        if (name, sample_id) not in self._reported:
            self._reported.add((name, sample_id))
            log.warning("reward %s raised on sample %s (scored as failed): %s: %s", name, sample_id, type(err).__name__, err)


def _with_args(fn: Callable, args: dict, key: str) -> Callable:
    """fn(completion, sample, **args); unknown argument names are a config error now, not a
    failure on every sample later."""
    try:
        inspect.signature(fn).bind("completion", {}, **args)
    except TypeError as err:
        raise RewardError(f"{key}: {err}") from None
    return functools.partial(fn, **args)


def build_reward(specs: list[RewardSpec], base_dir: str | Path = ".") -> CompositeReward:
    if not specs:
        raise RewardError("reward: at least one reward function is required")
    fns = []
    for i, spec in enumerate(specs):
        fn = resolve_function(spec.fn, key=f"reward[{i}].fn", base_dir=base_dir)
        if spec.args:
            fn = _with_args(fn, spec.args, key=f"reward[{i}].args")
        name = spec.name or spec.fn.rpartition(":")[2]
        if any(name == other for other, _, _ in fns):
            raise RewardError(f"reward[{i}]: two rewards are named {name!r}; set reward[{i}].name")
        fns.append((name, fn, spec.weight))
    return CompositeReward(fns, [(spec.combine, spec.gate_min) for spec in specs])
