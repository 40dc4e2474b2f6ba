"""Naming a reward function in a config: 'module:function', 'file.py:function' or a built-in
short name, resolved to the callable, with its config args bound. Shared by the composition
and its worker processes; it imports no torch."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import math
import numbers
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

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
    "code_tests": "aha.rewards:code_tests",
    "rubric_judge": "aha.rewards.judge:rubric_judge",
    "pairwise_judge": "aha.rewards.pairwise:pairwise_judge",
    "countdown": "aha.rewards:countdown",
    "yes_no": "aha.rewards:yes_no",
    "list_answer": "aha.rewards:list_answer",
    "embedding_similarity": "aha.rewards.semantic:embedding_similarity",
    "language_consistency": "aha.rewards.language:language_consistency",
    "sql_execution": "aha.rewards.sql:sql_execution",
}


FLOAT32_MAX = 3.4028234663852886e38  # step rewards become float32 tensors


class RewardError(ValueError):
    """A reward spec that cannot be used; the message names the config key."""


@dataclass(frozen=True)
class StepScores:
    """A reward given step by step (a process reward model's dense form): values[k] is step
    k's reward and ends[k] the character offset in the completion where step k ends. As a
    number it is the sum of its values, the completion's reward; a token-level advantage
    estimator (reinforce_pp, gae) is paid each value at the token that closes its step."""

    ends: tuple[int, ...]
    values: tuple[float, ...]

    def __post_init__(self):
        if len(self.ends) != len(self.values):
            raise ValueError(f"StepScores needs one end per value, got {len(self.ends)} ends and {len(self.values)} "
                             "values")
        if any(isinstance(e, bool) or not isinstance(e, numbers.Integral) or e < 1 for e in self.ends):
            raise ValueError(f"StepScores ends are character offsets after each step (integers >= 1), got {self.ends}")
        object.__setattr__(self, "ends", tuple(int(e) for e in self.ends))  # numpy integers too
        if any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in self.values):  # "1e30" is no number
            raise ValueError(f"StepScores values must be real numbers, got {self.values}")
        object.__setattr__(self, "values", tuple(float(v) for v in self.values))
        if any(not math.isfinite(v) or abs(v) > FLOAT32_MAX for v in self.values):
            raise ValueError(f"StepScores values must be finite numbers within float32's range, got {self.values}")

    def __float__(self) -> float:
        return float(sum(self.values))


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


# Python objects handed to aha.train (a lambda, a function of a notebook, a callable object): they have
# no importable name, so the config names them python:<name> and they are looked up here, in this
# process only, in the table of the call that was given them (aha/api/lending.py lends them for the
# call). A table a call: one call within another (a reward that trains) or in another thread has its own,
# so a name in config.yaml depends on that call alone, and the same call again resolves it alike.
IN_PROCESS = "python:"
_lent: ContextVar[dict[str, Callable] | None] = ContextVar("aha_python_rewards", default=None)


@contextmanager
def lending(rewards: dict[str, Callable]):
    """Within it (this thread, this call), python:<name> resolves to rewards[name]."""
    token = _lent.set(dict(rewards))
    try:
        yield
    finally:
        _lent.reset(token)


def lent() -> dict[str, Callable]:
    """The Python objects lent to the running call, by name (empty outside one)."""
    return dict(_lent.get() or {})


def resolve_function(path: str, key: str = "reward.fn", base_dir: str | Path = ".") -> Callable:
    """'module:function' or 'file.py:function' -> the callable; errors name the config key."""
    if path.startswith(IN_PROCESS):
        table = _lent.get() or {}
        if path not in table:
            raise RewardError(f"{key}: {path!r} names a Python object handed to aha.train in another call or "
                              "process; it exists only while that call runs: pass it again (aha.train(..., "
                              "reward=[...])), or give it an importable name ('module:function')")
        return table[path]
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


def batched(fn: Callable) -> Callable:
    """Mark fn(completions, samples, **args) -> list[float | dict | None] as a batched reward
    (a judge model scores many completions in one forward pass). None scores a sample as
    failed."""
    fn.aha_batched = True
    return fn


def grouped(fn: Callable) -> Callable:
    """Mark fn(completions, samples, **args) -> list[...] as a group reward: it is called once
    per group, the completions of one sample (same id and prompt: a GRPO group), with that
    group alone, because its scores compare them (a win rate within the group). A batched
    reward like any other otherwise: one score (or None) per completion, in order."""
    fn.aha_batched = True
    fn.aha_grouped = True
    return fn


@dataclass(frozen=True)
class Logged:
    """A score with numbers logged beside it that are not paid: the composition pays `value`
    and logs each of `logged` as the component '<name>/<key>' (a judge's position bias), never
    adding it to the total."""

    value: float
    logged: dict

    def __post_init__(self):
        numbers_ = [self.value, *self.logged.values()]
        if any(isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) for v in numbers_):
            raise ValueError(f"Logged holds finite real numbers, got {self.value!r} and {self.logged!r}")
        if not all(type(k) is str for k in self.logged):
            raise ValueError("Logged's logged numbers have string keys")

    def __float__(self) -> float:
        return float(self.value)


def bind_args(fn: Callable, args: dict, key: str, batched: bool = False) -> Callable:
    """fn(completion, sample, **args); unknown argument names are a config error now, not a
    failure on every sample later."""
    if "completion_tokens" in args:  # calls.TOKENS: the composition's to give, counted per completion
        raise RewardError(f"{key}.completion_tokens: the tokens the policy generated are counted for each completion "
                          "and given to the reward; they are not set in the config")
    try:
        inspect.signature(fn).bind([] if batched else "completion", [] if batched else {}, **args)
    except TypeError as err:
        raise RewardError(f"{key}: {err}") from None
    return functools.partial(fn, **args)


def with_config_folder(fn: Callable, args: dict, base_dir: str | Path) -> dict:
    """args, plus base_dir (the config's folder) for a function that declares that parameter and
    is not given it, so the paths in its args can be read relative to the recipe (as data is)."""
    try:
        declared = "base_dir" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or C function without a signature
        declared = False
    # absolute: a worker or Ray actor may run from another directory
    return {**args, "base_dir": str(Path(base_dir).resolve())} if declared and "base_dir" not in args else dict(args)
