"""The one training loop every method runs in: run folder and lock, resume, atomic
checkpoints, held-out evaluation, metrics, the report and Ctrl-C. What a step does is the
method's (training/methods.py); this file holds no maths.

train() takes the run folder's lock and turns failures into clear errors; _train() builds the
task, reward, model and engine and closes them again; a Run resumes, evaluates, saves and
steps."""

from __future__ import annotations

import errno
import logging
import os
import random
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from aha.config import Config, ConfigError, dump_config
from aha.envs import build_environment
from aha.eval import evaluate
from aha.eval.scoring import ScorerError, build_scorer
from aha.models import load
from aha.models.adapters import add_lora, trainable_parameters
from aha.models.checkpoints import checkpoint_step, list_checkpoints
from aha.models.compute import release_freed_memory, resolve_dtype
from aha.models.loading import lasting_name
from aha.rewards import build_reward
from aha.rollout import build_engine
from aha.tasks import build_task
from aha.tracking import RunDir
from aha.tracking.faults import kill_point
from aha.tracking.run_dir import RunWriteError, free_space
from aha.tracking.run_identity import resume_changes
from aha.tracking.run_lock import RunLock, RunLocked
from aha.tracking.run_report import write_run_report
from aha.tracking.sinks import open_sinks
from aha.training.checkpoint import (best_evaluated_step, load_changed, non_finite_tensors, save_checkpoint,
                                     whole_checkpoints)
from aha.training.interrupt import DeferredInterrupt, TrainingInterrupted, interrupted_message
from aha.training.method import Method, Setup
from aha.training.methods import method_for
from aha.training.phases import Phases, phase_summary

log = logging.getLogger(__name__)


@dataclass
class TrainSummary:
    run_dir: str
    steps: int
    accuracy_before: float | None
    accuracy_after: float | None
    train_seconds: float


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _unwritable(err: OSError, folder: Path) -> RunWriteError:
    return RunWriteError(f"cannot write the run folder {folder}: {err.strerror or err} ({err.filename}; "
                         f"{free_space(folder if folder.exists() else folder.parent)}): make room or make it "
                         "writable, then run again (train.resume=true continues from its last checkpoint)")


def train(config: Config, echo=print) -> TrainSummary:
    """Train with config.method; the run folder is config.output_dir."""
    fresh = not Path(config.output_dir).exists()
    try:
        run = RunDir(config.output_dir)
        run.attach_log()
    except OSError as err:  # a folder that cannot be made or written at all
        raise _unwritable(err, Path(config.output_dir)) from None
    lock = RunLock(run.path)
    try:
        lock.acquire()  # before anything reads or writes the run's files
        if lock.stale is not None:
            log.warning("took over a stale %s (its process is gone): %s", lock.path, lock.stale)
        checkpoints = list_checkpoints(run.checkpoints)
        if run.metrics_path.exists() and not config.train.resume:
            raise ConfigError(f"output_dir {run.path} already holds a run; pick another output_dir or set train.resume=true")
        # only a resume from a checkpoint continues the old run; without one the run starts afresh
        changes, measured = resume_changes(run.path, config) if config.train.resume and checkpoints else ({}, [])
        if measured:
            log.warning("held-out evaluation settings changed on resume: %s", measured)
            echo(f"note: {', '.join(measured)} changed since the run's config.yaml: held-out accuracies logged "
                 "before this resume were measured with the old settings")
        return _train(config, run, checkpoints, changes, echo)
    except RunLocked:  # this log.txt is the live run's: say who knocked, not that training stopped
        log.warning("process %d on %s was refused: the run is held by another process", os.getpid(), socket.gethostname())
        raise
    except TrainingInterrupted as err:
        log.error("%s", err, exc_info=True)
        echo(str(err))
        raise
    except KeyboardInterrupt as err:  # outside the steps (loading, held-out evaluation, report)
        stop = TrainingInterrupted(interrupted_message(run, "", None))
        log.error("%s", stop, exc_info=True)
        echo(str(stop))
        raise stop from err
    except OSError as err:
        log.error("training stopped by an error", exc_info=True)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):  # a write's own error names no file
            raise _unwritable(err, run.path) from None
        refused = err.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
        if refused and err.filename is not None and Path(err.filename).resolve().is_relative_to(run.path.resolve()):
            raise _unwritable(err, run.path) from None  # the run's own folder refused a write
        raise
    except BaseException:  # every crash is in log.txt with its traceback, not only on a console
        log.error("training stopped by an error", exc_info=True)
        raise
    finally:
        lock.release()
        run.detach_log()
        if fresh and not (run.path / "config.yaml").exists():
            # a launch that failed before its run began (a bad task or reward, a missing model): the
            # error is on the console, and no empty run folder is left behind
            shutil.rmtree(run.path, ignore_errors=True)


def _train(config: Config, run: RunDir, checkpoints: list, changes: dict, echo) -> TrainSummary:
    """Build what the run needs (whatever can fail on bad input before the slow model load),
    run it, and close what it held, the newest first."""
    seed_everything(config.seed)
    method_class = method_for(config)
    task = build_task(config.task, config.base_dir)
    reward = build_reward(config.reward, config.base_dir, dtype=config.train.dtype, ray=config.ray)
    prepared = engine = None
    try:
        prepared = method_class.prepare(config, task, reward)
        scorer = build_scorer(config, reward)  # held-out accuracy: by default the run's own reward
        env = build_environment(config.env, reward, config.base_dir)
        model, tokenizer, dtype = _load_policy(config, task)
        # a method that never samples (reward models) needs only the tokenizer's padding: no worker
        rollout = config.rollout if method_class.generates else config.rollout.model_copy(update={"engine": "hf"})
        engine = build_engine(rollout, model, tokenizer, dtype, seed=config.seed,
                              ray=config.ray if method_class.generates else None)
        setup = Setup(config, run.path, task, reward, scorer, model, tokenizer, engine, dtype, env)
        method = method_class(setup, prepared)
        try:
            return Run(config, run, method, setup, echo).run(checkpoints, changes)
        finally:
            method.close()
    finally:
        if engine is not None:
            engine.close()
        for held in (reward, prepared):  # worker processes of pooled rewards
            if held is not None and hasattr(held, "close"):
                held.close()
        if config.ray.rollout_workers or config.ray.reward_workers:
            from aha.ray_cluster import release_ray

            release_ray()  # a local cluster this run started goes with it


def _load_policy(config: Config, task) -> tuple[torch.nn.Module, object, torch.dtype]:
    """The policy (with LoRA adapters when lora.rank is set), its tokenizer and the compute dtype."""
    loaded = load(config.model, seed=config.seed)
    model, tokenizer = loaded.model, loaded.tokenizer
    if config.lora.rank:
        add_lora(model, config.lora.rank, config.lora.alpha, config.lora.dropout, config.lora.target_modules,
                 base=lasting_name(config.model))
        trainable = sum(p.numel() for p in trainable_parameters(model))
        log.info("LoRA rank %d on %s: %d trainable parameters of %d", config.lora.rank, config.lora.target_modules,
                 trainable, sum(p.numel() for p in model.parameters()))
    dtype = resolve_dtype(config.train.dtype)
    log.info("method %s, model %s, compute dtype %s, %d train / %d held-out samples", config.method, loaded.name,
             dtype, len(task.train), len(task.eval))
    return model, tokenizer, dtype


class Run:
    """One run in progress: the method and what it trains (setup), the run folder, the step a
    resume starts from, the newest checkpoint's step and the accuracy before training."""

    def __init__(self, config: Config, folder: RunDir, method: Method, setup: Setup, echo):
        self.config, self.folder, self.method, self.setup, self.echo = config, folder, method, setup, echo
        self.start = 0  # the step the run resumes after (0: a fresh run)
        self.saved = 0  # the newest checkpoint's step (0: none)
        self.accuracy_before: float | None = None

    def run(self, checkpoints: list[Path], changes: dict) -> TrainSummary:
        """Resume (or start afresh), then evaluate, train and evaluate, metrics sinks open throughout."""
        config, folder = self.config, self.folder
        if config.train.resume and checkpoints:
            self.resume(checkpoints, changes)
            self.setup.engine.sync_weights(self.setup.model)  # an engine with its own copy must sample the resumed weights
        else:
            folder.truncate_after(-1)
        folder.write_config(dump_config(config))
        folder.sinks = open_sinks(config.tracking, folder.path, self.start, folder.path.name, config.model_dump(mode="json"))
        try:
            evaluated = self.evaluate_before()
            began = time.time()
            self.steps()
            return self.finish(evaluated, time.time() - began)
        finally:
            if folder.sinks is not None:
                folder.sinks.close()
            folder.sinks = None

    def resume(self, checkpoints: list[Path], changes: dict) -> None:
        """Load the newest whole checkpoint into the method and cut the run's files back to its step."""
        method, folder, echo = self.method, self.folder, self.echo
        checkpoints = whole_checkpoints(checkpoints, echo)
        state, extra = load_changed(checkpoints[-1], method.modules, method.optimizers, changes)
        poisoned = non_finite_tensors(method.modules, method.optimizers)
        if poisoned:
            earlier = f"Delete it to resume from {checkpoints[-2]}, or pick" if len(checkpoints) > 1 else "Pick"
            raise ConfigError(f"checkpoint {checkpoints[-1]} holds NaN or inf in {len(poisoned)} tensors (first: "
                              f"{poisoned[0]}); training on it would spread them. {earlier} a new output_dir to "
                              "start afresh")
        start = self.start = self.saved = state["step"]
        folder.truncate_after(start)
        method.restore(state, extra, folder.read_metrics())
        echo(f"resumed from {checkpoints[-1]} (step {start})")
        if changes:
            method.apply_hyperparameters()  # load_state_dict brought back the old ones
            folder.append_config_history(start + 1, changes)
            log.warning("config changed from step %d on (train.allow_config_change): %s", start + 1, changes)
            echo(f"config changed from step {start + 1} on: {', '.join(changes)} "
                 f"(recorded in {folder.path / 'config_history.jsonl'})")
        self.accuracy_before = state.get("accuracy_before")

    def evaluate_before(self) -> dict:
        """The held-out evaluation before training, or, resumed, one an interrupted run owed at its
        checkpoint's step. Returns the evaluations at that step already in metrics.jsonl (records
        without a step's own time/step_s)."""
        config, start = self.config, self.start
        if start == 0 and config.eval.before:
            self.accuracy_before = self.evaluate(0, "before training")
        evaluated = {r["step"]: r.get("eval/accuracy") for r in self.folder.read_metrics()
                     if start and r.get("step") == start and "time/step_s" not in r}
        every = config.eval.every
        if start and every and start % every == 0 and start != config.train.steps and start not in evaluated:
            self.folder.drop_samples(start, "eval")  # any an interrupted evaluation wrote before its record
            self.evaluate(start, "during training")
        return evaluated

    def evaluate(self, step: int, label: str) -> float | None:
        """A held-out evaluation: greedy accuracy (or the method's own metrics), its samples first."""
        method, setup, config, folder, echo = self.method, self.setup, self.config, self.folder, self.echo
        if not method.generates:  # e.g. a reward model: only its own held-out metrics
            record = method.held_out(step)
            if not record:  # nothing held out to measure (no eval data)
                return None
            folder.log_metrics({"step": step, **record})
            echo(f"held-out ({label}, step {step}): " + ", ".join(f"{k} {v:.3g}" for k, v in record.items()))
            return None
        try:
            result = evaluate(setup.engine, setup.task, setup.scorer, config.eval.limit, config.eval.max_new_tokens,
                              desc=f"eval ({label})", env=setup.env)
        except ScorerError as err:  # stop: what the run wrote so far (metrics, checkpoints) stays as it is
            log.error("held-out evaluation at step %d stopped: %s", step, err)
            raise ScorerError(f"{err}\nThe run stopped at the held-out evaluation {label} (step {step}); {folder.path} "
                              "keeps what it wrote so far; train.resume=true continues from its last checkpoint") from None
        kill_point("eval")  # evaluated, not written yet
        # the samples first: the record says the evaluation is whole (a resume redoes one without it)
        folder.log_samples([{"step": step, "split": "eval", **r} for r in result.samples[:8]])
        kill_point("eval-samples")  # its samples written, its record not
        folder.log_metrics({"step": step, "eval/accuracy": result.accuracy, "eval/n": result.n, **result.metrics,
                            **method.held_out(step)})
        echo(f"held-out greedy accuracy ({label}, step {step}): {result.accuracy:.1%} of {result.n}")
        if result.metrics:  # multi-turn episodes: the first answer's accuracy too
            echo(f"  first-turn accuracy {result.metrics['eval/first_turn_accuracy']:.1%}, "
                 f"mean turns {result.metrics['eval/turns']:.2f}")
        return result.accuracy

    def save(self, step: int) -> None:
        """A checkpoint of this step (keep_best: the best evaluated one is kept beside the newest)."""
        config, method, folder = self.config, self.method, self.folder
        best = None
        if config.train.keep_best:  # from metrics.jsonl: what a resumed run decides is what a straight one did
            best = best_evaluated_step(folder.read_metrics(),
                                       {checkpoint_step(p) for p in list_checkpoints(folder.checkpoints)})
        save_checkpoint(folder.checkpoints, step, method.modules, method.optimizers,
                        {"accuracy_before": self.accuracy_before, **method.state()}, config.train.keep_checkpoints,
                        method.extra_state(), tokenizer=self.setup.tokenizer, files=method.checkpoint_files(),
                        keep_also=best)
        self.saved = step

    def steps(self) -> None:
        """The steps from the resumed one to train.steps: each step's record and samples, its
        checkpoint and evaluation when due. The first Ctrl-C finishes the step and saves it."""
        config, folder = self.config, self.folder
        bar = tqdm(range(self.start + 1, config.train.steps + 1), initial=self.start, total=config.train.steps,
                   desc="train", unit="step")
        in_step, step = False, self.start
        try:
            with DeferredInterrupt(self.echo) as interrupt:
                for step in bar:
                    in_step = True
                    record, examples = self.step(step)
                    kill_point("step")  # trained, nothing of the step written yet
                    in_step = False
                    folder.log_metrics(record)
                    self.method.after_step(record, self.echo)
                    folder.log_samples([{"step": step, "split": "train", **e} for e in examples[: config.train.log_samples]])
                    bar.set_postfix(self.method.postfix(record))
                    every = config.train.checkpoint_every
                    if (every and step % every == 0) or step == config.train.steps or interrupt.requested:
                        self.save(step)
                    if interrupt.requested:
                        raise KeyboardInterrupt
                    if config.eval.every and step % config.eval.every == 0 and step != config.train.steps:
                        self.evaluate(step, "during training")
        except KeyboardInterrupt as err:
            bar.close()
            if not in_step and step > self.saved:  # between steps the state is whole: keep it
                self.save(step)
            where = f"during step {step}" if in_step else f"after step {step}"
            raise TrainingInterrupted(interrupted_message(folder, where, self.saved)) from err
        bar.close()

    def step(self, step: int) -> tuple[dict, list[dict]]:
        """One of the method's steps, timed: each phase as time/<phase>_s, the whole as time/step_s."""
        engine = self.setup.engine
        synced, began, phases = engine.sync_seconds, time.time(), Phases()
        record, examples = self.method.step(step, phases)
        record.update({**phases.record(), "time/step_s": time.time() - began})
        engine.sync_weights(self.setup.model)  # the engine samples from the new weights from here on
        # the time this step spent handing weights to the engine (an engine may do it
        # lazily, at its next generate: then it is the previous update's weights)
        record["time/sync_s"] = engine.sync_seconds - synced
        release_freed_memory()
        return record, examples

    def finish(self, evaluated: dict, train_seconds: float) -> TrainSummary:
        """The method's last words, the held-out evaluation after training, the summary and the report."""
        config, echo, steps = self.config, self.echo, self.config.train.steps
        self.method.finish(echo)
        if config.eval.after and self.start == steps and self.start in evaluated:  # made before a stop
            accuracy_after = evaluated[self.start]
        else:
            if config.eval.after and self.start == steps:
                self.folder.drop_samples(self.start, "eval")
            accuracy_after = self.evaluate(steps, "after training") if config.eval.after else None
        before = self.accuracy_before
        if before is not None and accuracy_after is not None:
            echo(f"held-out greedy accuracy: {before:.1%} -> {accuracy_after:.1%} "
                 f"({(accuracy_after - before) * 100:+.1f} points) after {steps} steps, "
                 f"{train_seconds / 60:.1f} min of training")
        timing = phase_summary(self.folder.read_metrics())
        if timing:
            echo(f"time: {timing}")
        if config.train.report:
            echo(f"report: {write_run_report(self.folder.path)}")
        return TrainSummary(str(self.folder.path), steps, before, accuracy_after, train_seconds)
