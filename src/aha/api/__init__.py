"""aha from Python (a notebook, a script): `train`, `evaluate` and `load_config`, the same runs as the
`aha` command. A config is a YAML path, a Config, a dict or nothing (the defaults); settings are
keyword arguments, `train__steps=3` for the CLI's `train.steps=3` (or `train={"steps": 3}`, merged
into the section). Rewards may be Python callables and data a list of dicts or a datasets.Dataset.

Errors are the CLI's exceptions with the CLI's messages (ConfigError, TaskError, RewardError, ...);
an interrupted run raises TrainingInterrupted, a KeyboardInterrupt; nothing here exits the process.
A call leaves no state behind: the random generators are as before it, the Python rewards it was
given are forgotten, and the signal handlers and log handlers it set are taken down."""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from aha.api.lending import lent_again, python_rewards
from aha.config import Config, ConfigError, from_dict, read_mapping
from aha.eval.greedy import HeldOut, greedy_held_out
from aha.models.checkpoints import list_checkpoints
from aha.perf.fit import check_before_training
from aha.tracking import RunDir
from aha.training.loop import train as train_config

DATA_KEYS = {"dpo": "dpo", "sft": "sft", "rm": "rm", "prm": "prm"}  # the methods with data of their own


@dataclass
class Run:
    """A finished run: its folder and config, and what it measured (read from its files)."""

    folder: Path
    config: Config
    steps: int
    accuracy_before: float | None  # held-out greedy accuracy, None where none was measured
    accuracy_after: float | None
    train_seconds: float
    # the Python rewards it was given without an importable name (config: python:<name>), for evaluate
    rewards: dict[str, Callable] = field(default_factory=dict, repr=False)

    @property
    def metrics(self) -> list[dict]:
        """metrics.jsonl: one record a step, and one a held-out evaluation."""
        return RunDir(self.folder).read_metrics()

    def metrics_frame(self):
        """metrics as a pandas DataFrame, one row a record (pandas is imported here only)."""
        import pandas

        return pandas.DataFrame(self.metrics)

    @property
    def held_out(self) -> list[dict]:
        """The held-out evaluations' records (eval/... and a method's own, e.g. pref_eval/...)."""
        return [r for r in self.metrics if "time/step_s" not in r]

    @property
    def checkpoints(self) -> list[Path]:
        return list_checkpoints(self.folder / "checkpoints")

    @property
    def samples(self) -> list[dict]:
        path = self.folder / "samples.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def load_config(config: str | Path | Config | dict | None = None, **settings) -> Config:
    """A Config from a YAML file, a Config, a dict or the defaults, with settings applied over it."""
    raw, source, path = _raw(config)
    loaded = from_dict(raw, source, _apply(raw, settings))
    loaded._origin = (path, ())
    return loaded


def train(config: str | Path | Config | dict | None = None, *, reward: Any = None, data: Any = None,
          eval_data: Any = None, echo: Callable[[str], None] = print, **settings) -> Run:
    """Train as `aha train` does and return the Run. reward: a callable (completion, sample) ->
    float, a class or object with such a __call__, a "module:function" name, a dict (a reward
    component: {"fn": ..., "weight": ...}), or a list of these; it replaces the config's reward.
    data / eval_data: a list of dicts, a datasets.Dataset or a file; the method's own data (dpo.data,
    sft.data, rm.data, prm.data) or else task.data / task.eval_data, written into the run folder's
    data/ (so the run can be read and resumed later)."""
    raw, source, path = _raw(config)
    names = _apply(raw, settings)
    folder = Path(raw.get("output_dir") or Config.model_fields["output_dir"].default)
    fresh = not folder.exists()
    try:
        with python_rewards(raw, reward, echo) as lent:
            _place_data(raw, raw.get("method") or "rl", folder, data, eval_data)
            reward_names = [f"reward[{i}]={spec['fn']!r}" for i, spec in enumerate(raw["reward"])] if reward else []
            config = from_dict(raw, source, names + reward_names)
            config._origin = (path, ())
            if config.distributed.processes > 1 or config.ray.learner_workers > 1:
                return _train_on_ranks(config, lent)
            with _rng_kept():
                check_before_training(config)  # train.memory_check, as `aha train` does, before the model loads
                summary = train_config(config, echo=echo)
    finally:
        if fresh and folder.exists() and not (folder / "config.yaml").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a launch that failed leaves no folder behind
    return Run(Path(summary.run_dir), config, summary.steps, summary.accuracy_before, summary.accuracy_after,
               summary.train_seconds, lent)


def _train_on_ranks(config: Config, lent: dict) -> Run:
    """Several learner ranks: `aha train` on the resolved config, as the command starts them
    (torchrun's processes or Ray actors), then the Run read back from the run folder."""
    import tempfile
    import time

    from aha.cli.learners import train_on_ranks
    from aha.config import dump_config

    if lent:
        raise ConfigError(f"distributed.processes / ray.learner_workers start other processes, and the rewards "
                          f"{', '.join(lent)} exist only in this one: give them importable names "
                          "('module:function', a function at the top level of a module)")
    began = time.time()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_text(dump_config(config))
        # the ranks import rewards by name as this process does: from its sys.path (a notebook's
        # folder, pytest's test folders), not only from the installed packages
        paths = [p for p in sys.path if p and Path(p).is_dir()]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        status = train_on_ranks(config, ["train", str(path)], env, own_session=True)
    if status:
        raise RuntimeError(f"the learner ranks stopped (exit status {status}); the report above names the rank "
                           f"that failed first; train__resume=True continues from {config.output_dir}'s last "
                           "checkpoint")
    evaluated = [r["eval/accuracy"] for r in RunDir(config.output_dir).read_metrics() if "eval/accuracy" in r]
    before = evaluated[0] if evaluated and config.eval.before else None
    after = evaluated[-1] if evaluated and config.eval.after else None
    return Run(Path(config.output_dir), config, config.train.steps, before, after, time.time() - began)


def evaluate(config: str | Path | Config | dict | Run | None = None, *, model: str | None = None,
             checkpoint: str | Path | None = None, data: Any = None, **settings) -> HeldOut:
    """Greedy held-out accuracy, as `aha eval` measures it: of the config's model, of a checkpoint's
    weights in it, or of another model or checkpoint folder (model). Given a Run: its newest
    checkpoint on its own held-out data, scored as it was. data: held-out rows (a list of dicts, a
    Dataset or a file) instead of the config's."""
    rewards: dict[str, Callable] = {}
    if isinstance(config, Run):
        checkpoint = checkpoint or (config.checkpoints[-1] if config.checkpoints else None)
        config, rewards = config.config, config.rewards
    raw, source, _ = _raw(config)
    names = _apply(raw, settings)
    if data is not None:
        rows = _rows_file(data, Path(raw.get("output_dir") or "runs/default") / "data", "eval")
        raw["task"] = {**(raw.get("task") or {}), "data": rows, "eval_data": rows, "eval_fraction": None}
    with lent_again(rewards), _rng_kept():
        return greedy_held_out(from_dict(raw, source, names), str(checkpoint) if checkpoint else None, model)


def _raw(config) -> tuple[dict, str, str | None]:
    """(the raw config dict, where it came from, its file or None)."""
    if config is None:
        return {}, "aha.load_config's arguments", None
    if isinstance(config, Config):
        return config.model_dump(mode="json", exclude_unset=False), "the Config given", config.origin[0]
    if isinstance(config, dict):
        return json.loads(json.dumps(config)), "the dict given", None
    path = Path(config)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    raw = read_mapping(path)
    raw.setdefault("base_dir", str(path.parent))
    return raw, str(path), str(path)


def _apply(raw: dict, settings: dict) -> list[str]:
    """Apply keyword settings (train__steps=3, or train={"steps": 3}) to raw; returns them as the
    CLI's dotted overrides, so an error names the setting at fault."""
    names = []
    for name, value in settings.items():
        dotted = name.replace("__", ".")
        names.append(f"{dotted}={value!r}")
        _merge(raw, dotted.split("."), value)
    return names


def _merge(raw: dict, parts: list[str], value) -> None:
    """Set raw[a][b]... = value; a dict value is merged into the section there, not put in its place."""
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"setting {'__'.join(parts)}: {'.'.join(parts[: i + 1])} is not a section")
        node = child
    leaf = parts[-1]
    if isinstance(value, dict) and isinstance(node.get(leaf), dict):
        for key, inner in value.items():
            _merge(node[leaf], [key], inner)
    else:
        node[leaf] = value


def _place_data(raw: dict, method: str, folder: Path, data, eval_data) -> None:
    """data and eval_data as files in the run folder (data/), named in the method's section or the task."""
    section = DATA_KEYS.get(method, "task")
    if data is not None:
        raw.setdefault(section, {})["data"] = _rows_file(data, folder / "data", "train")
    if eval_data is not None:
        raw.setdefault(section, {})["eval_data"] = _rows_file(eval_data, folder / "data", "eval")


def _rows_file(rows, folder: Path, split: str) -> str:
    """A file of rows: a path as it is; a list of dicts or a datasets.Dataset written as JSON lines,
    named by its content (an existing file is never overwritten with other rows)."""
    if isinstance(rows, (str, Path)):
        return str(Path(rows).resolve())
    import hashlib

    text = "".join(json.dumps(dict(row), ensure_ascii=False) + "\n" for row in rows)
    if not text:
        raise ConfigError(f"the {split} data given to aha is empty")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{split}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.jsonl"
    if not path.exists():
        path.write_text(text)
    return str(path.resolve())


@contextmanager
def _rng_kept():
    """Python's, NumPy's and torch's random generators as they were before (a run seeds them)."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
