"""aha from Python (a notebook, a script): `train`, `evaluate` and `load_config`, the same runs as the
`aha` command. A config is a YAML path, a Config, a dict or nothing (the defaults); settings are
keyword arguments, `train__steps=3` for the CLI's `train.steps=3` (or `train={"steps": 3}`, merged
into the section). Rewards may be Python callables and data a list of dicts, a datasets.Dataset or a
pandas DataFrame.

Errors are the CLI's exceptions with the CLI's messages (ConfigError, TaskError, RewardError, ...);
an interrupted run raises TrainingInterrupted, a KeyboardInterrupt; nothing here exits the process.
A call leaves no state behind: the random generators are as before it, the Python rewards it was
given are forgotten, and the signal handlers and log handlers it set are taken down."""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from aha.api.data import own_task, place_data, rows_file, write_files
from aha.api.lending import lent_again, python_rewards
from aha.api.settings import apply_settings, config_mapping
from aha.config import Config, ConfigError, from_dict
from aha.eval.greedy import HeldOut, greedy_held_out
from aha.jsonl import read_jsonl
from aha.models.checkpoints import list_checkpoints
from aha.perf.fit import check_before_training
from aha.tracking import RunDir
from aha.training.interrupt import TrainingInterrupted, interrupted_message
from aha.training.loop import train as train_config


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
        path = self.folder / "samples.jsonl"  # a run killed mid-write leaves a torn last line: left out
        return [row for _, row in read_jsonl(path, torn_tail=True)] if path.exists() else []


def load_config(config: str | Path | Config | dict | None = None, **settings) -> Config:
    """A Config from a YAML file, a Config, a dict or the defaults, with settings applied over it."""
    raw, source = config_mapping(config, "aha.load_config")
    return from_dict(raw, source, apply_settings(raw, settings))


def train(config: str | Path | Config | dict | None = None, *, reward: Any = None, data: Any = None,
          eval_data: Any = None, echo: Callable[[str], None] = print, **settings) -> Run:
    """Train as `aha train` does and return the Run. reward: a callable (completion, sample) ->
    float, a class or object with such a __call__, a "module:function" name, a dict (a reward
    component: {"fn": ..., "weight": ...}, or {"model": ...}), or a list of these; it replaces the
    config's reward. data / eval_data: a list of dicts, a datasets.Dataset, a pandas DataFrame or a
    file; the method's own data (dpo.data, sft.data, rm.data, prm.data) or else the task's (rows
    given for the task replace a built-in task), written into the run folder's data/ (so the run
    can be read and resumed later)."""
    raw, source = config_mapping(config, "aha.train")
    names = apply_settings(raw, settings)
    folder = Path(raw.get("output_dir") or Config.model_fields["output_dir"].default)
    fresh = not folder.exists()
    try:
        with python_rewards(raw, reward, echo) as lent, _state_kept():
            files = place_data(raw, raw.get("method") or "rl", folder, data, eval_data)
            reward_names = [f"reward.{i}={spec.get('fn', spec.get('model'))!r}"
                            for i, spec in enumerate(raw["reward"])] if reward is not None else []
            config = from_dict(raw, source, names + reward_names)  # origin (None, ()): resume from its config.yaml
            write_files(files)  # only now: a config refused writes nothing
            if config.distributed.processes > 1 or config.ray.learner_workers > 1:
                return _train_on_ranks(config, lent)
            check_before_training(config)  # train.memory_check, as `aha train` does, before the model loads
            summary = train_config(config, echo=echo)
    finally:
        if fresh and folder.exists() and not (folder / "config.yaml").exists():
            shutil.rmtree(folder, ignore_errors=True)  # a launch that failed leaves no folder behind
    return Run(Path(summary.run_dir), config, summary.steps, summary.accuracy_before, summary.accuracy_after,
               summary.train_seconds, lent)


def _train_on_ranks(config: Config, lent: dict) -> Run:
    """Several learner ranks: `aha train` on the resolved config, as the command starts them
    (torchrun's processes or Ray actors), then the Run read back from the run folder. The ranks read
    the config from the run folder's data/launch-config.yaml, which stays, as the hint they give on
    an interrupt names it."""
    import time

    from aha.cli.learners import train_on_ranks
    from aha.config import dump_config

    if lent:
        raise ConfigError(f"distributed.processes / ray.learner_workers start other processes, and the rewards "
                          f"{', '.join(lent)} exist only in this one: give them importable names "
                          "('module:function', a function at the top level of a module)")
    began = time.time()
    launch = Path(config.output_dir) / "data" / "launch-config.yaml"
    launch.parent.mkdir(parents=True, exist_ok=True)
    launch.write_text(dump_config(config))
    # the ranks import rewards by name as this process does: from its sys.path (a notebook's
    # folder, pytest's test folders), not only from the installed packages
    paths = [p for p in sys.path if p and Path(p).is_dir()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    status = train_on_ranks(config, ["train", str(launch)], env, own_session=True)
    if status in (128 + signal.SIGHUP, 128 + signal.SIGINT, 128 + signal.SIGTERM):
        raise TrainingInterrupted(_ranks_stopped(config, status), status)
    if status:
        raise RuntimeError(f"the learner ranks stopped (exit status {status}); the report above names the rank "
                           f"that failed first; train__resume=True continues from {config.output_dir}'s last "
                           "checkpoint")
    evaluated = [r["eval/accuracy"] for r in RunDir(config.output_dir).read_metrics() if "eval/accuracy" in r]
    before = evaluated[0] if evaluated and config.eval.before else None
    after = evaluated[-1] if evaluated and config.eval.after else None
    return Run(Path(config.output_dir), config, config.train.steps, before, after, time.time() - began)


def _ranks_stopped(config: Config, status: int) -> str:
    """What an interrupt of the learner ranks left, and how to continue (as the ranks say it)."""
    by = signal.Signals(status - 128).name
    if not (Path(config.output_dir) / "config.yaml").exists():  # the folder goes with the call (train's finally)
        return f"aha: the learner ranks were stopped by {by} before the run began; nothing was saved: run it again"
    return interrupted_message(RunDir(config.output_dir), f"(the learner ranks, by {by})", None, config)


def evaluate(config: str | Path | Config | dict | Run | None = None, *, model: str | None = None,
             checkpoint: str | Path | None = None, data: Any = None, **settings) -> HeldOut:
    """Greedy held-out accuracy, as `aha eval` measures it: of the config's model, of a checkpoint's
    weights in it, or of another model or checkpoint folder (model). Given a Run: its newest
    checkpoint on its own held-out data, scored as it was. data: held-out rows (a list of dicts, a
    Dataset, a DataFrame or a file) instead of the config's task (a built-in one too). A run that
    measures no greedy accuracy (eval.greedy false, a reward model) is refused, with where its
    held-out evaluations are; of a policy, data= asks for greedy accuracy on those rows."""
    rewards: dict[str, Callable] = {}
    if isinstance(config, Run):
        checkpoint = checkpoint or (config.checkpoints[-1] if config.checkpoints else None)
        config, rewards = config.config, config.rewards
    raw, source = config_mapping(config, "aha.evaluate")
    names = apply_settings(raw, settings)
    with tempfile.TemporaryDirectory() as folder:  # rows given: a file for the call alone
        files: dict[Path, str] = {}
        if data is not None:
            rows = rows_file(data, Path(folder), "eval", files)
            own_task(raw).update(data=rows, eval_data=rows, eval_fraction=None)
        with lent_again(rewards), _state_kept():
            built = from_dict(raw, source, names)
            _measures_greedy(built, data is not None)
            write_files(files)
            return greedy_held_out(built, str(checkpoint) if checkpoint else None, model)


def _measures_greedy(config: Config, rows_given: bool) -> None:
    """A ConfigError where greedy accuracy is not what the config's run measures."""
    if config.method in ("rm", "prm"):
        raise ConfigError(f"aha.evaluate measures a policy's greedy accuracy; a method: {config.method} run trains a "
                          "reward model, which generates no answers: its held-out evaluations (pairwise or step "
                          "accuracy) are in its metrics.jsonl (Run.held_out)")
    if not config.eval.greedy and not rows_given:
        raise ConfigError(f"this method: {config.method} run measures no greedy accuracy (eval.greedy is false, as for "
                          "dpo or sft on their own data with no task named), so there are no held-out task rows to "
                          "answer; "
                          "its held-out evaluations are in its metrics.jsonl (Run.held_out); to measure greedy "
                          "accuracy on rows of your own: aha.evaluate(run, data=[...])")


@contextmanager
def _state_kept():
    """Python's, NumPy's and torch's random generators (a run seeds them) and the "aha" logger's
    level (a run's log.txt sets it) as they were before."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    level = logging.getLogger("aha").level
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        logging.getLogger("aha").setLevel(level)
