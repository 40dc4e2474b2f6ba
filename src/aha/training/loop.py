"""The one training loop every method runs in: run folder and lock, resume, atomic
checkpoints, held-out evaluation, metrics, the report and Ctrl-C. What a step does is the
method's (training/methods.py); this file holds no maths."""

from __future__ import annotations

import errno
import logging
import os
import random
import shutil
import signal
import socket
import threading
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
from aha.models.loading import lasting_name
from aha.models.adapters import add_lora, trainable_parameters
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
from aha.models.checkpoints import checkpoint_step, list_checkpoints, verify_checkpoint
from aha.models.compute import release_freed_memory
from aha.training.checkpoint import best_evaluated_step, load_checkpoint, non_finite_tensors, save_checkpoint
from aha.training.method import Method, Setup
from aha.training.methods import method_for
from aha.training.phases import Phases, phase_summary
from aha.models.compute import resolve_dtype

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


class TrainingInterrupted(SystemExit):
    """Ctrl-C: ends the program with status 130 and a message saying how to resume, not a traceback."""

    def __init__(self, message: str):
        super().__init__(130)
        self.message = message

    def __str__(self) -> str:
        return self.message


def interrupted_message(run: RunDir, where: str, saved: int | None) -> str:
    """saved: the step of the newest checkpoint (0: none), None: see the checkpoints folder."""
    if saved is None:
        kept = list_checkpoints(run.checkpoints)
        saved = checkpoint_step(kept[-1]) if kept else 0
    held = f"checkpoint {run.checkpoints / f'step-{saved}'} holds step {saved}" if saved else "no checkpoint was written yet"
    return (f"aha: training interrupted{' ' + where if where else ''}; {held}. Continue with: "
            f"aha train <config> train.resume=true (output_dir {run.path})")


class DeferredInterrupt:
    """Within it, the first Ctrl-C lets the running step finish, so the checkpoint saved after it
    resumes exactly; a second Ctrl-C stops at once. Outside the main thread it does nothing."""

    def __init__(self, echo):
        self.requested, self._echo, self._installed = False, echo, False

    def __enter__(self) -> "DeferredInterrupt":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def _handle(self, signum, frame) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self._echo("\nCtrl-C: finishing this step and saving a checkpoint (Ctrl-C again to stop at once)")

    def __exit__(self, *exc) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous if self._previous is not None else signal.default_int_handler)


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
    seed_everything(config.seed)
    method_class = method_for(config)
    # build everything that can fail on bad input before the slow model load
    task = build_task(config.task, config.base_dir)
    reward = build_reward(config.reward, config.base_dir, dtype=config.train.dtype, ray=config.ray)
    prepared = None
    try:
        prepared = method_class.prepare(config, task, reward)
        scorer = build_scorer(config, reward)  # held-out accuracy: by default the run's own reward
        env = build_environment(config.env, reward, config.base_dir)
        return _run(config, run, checkpoints, changes, echo, method_class, prepared, task, reward, scorer, env)
    finally:
        for held in (reward, prepared):  # worker processes of pooled rewards
            if held is not None and hasattr(held, "close"):
                held.close()
        if config.ray.rollout_workers or config.ray.reward_workers:
            from aha.ray_cluster import release_ray

            release_ray()  # a local cluster this run started goes with it


def _load_changed(folder, modules: dict, optimizers: dict, changes: dict) -> tuple[dict, dict]:
    """load_checkpoint, with an error naming the config changes when they do not fit the checkpoint
    (a critic, a reference model or a replay buffer that it does or does not hold)."""
    try:
        return load_checkpoint(folder, modules, optimizers)
    except (FileNotFoundError, KeyError, RuntimeError, ValueError) as err:
        if not changes:
            raise
        raise ConfigError(f"checkpoint {folder} does not fit the changed config ({', '.join(changes)}): {err}; "
                          "pick a new output_dir for these changes") from None


def _whole_checkpoints(checkpoints: list[Path], echo) -> list[Path]:
    """The checkpoints up to the newest whole one (its files as its manifest lists them).
    Each damaged newer one (a bit flipped on disk, a file cut short) is named and renamed
    damaged-step-N beside the others for a look; the whole one before it is used. With none
    whole, nothing is moved and the run stops, saying so."""
    damage = {}
    for index in range(len(checkpoints) - 1, -1, -1):
        damage[index] = verify_checkpoint(checkpoints[index])
        if damage[index] is None:
            break
    else:
        raise ConfigError(f"no whole checkpoint in {checkpoints[0].parent}: " + "; ".join(
            f"{checkpoints[i].name}: {why}" for i, why in sorted(damage.items())) + ". Pick a new output_dir (or "
            "move this run folder away) to start again")
    for bad in range(len(checkpoints) - 1, index, -1):
        folder = checkpoints[bad]
        aside = folder.with_name(f"damaged-{folder.name}")
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(folder, aside)
        log.error("checkpoint %s is damaged (%s); moved to %s", folder, damage[bad], aside)
        echo(f"checkpoint {folder} is damaged ({damage[bad]}): moved to {aside}; resuming from {checkpoints[index]}")
    return checkpoints[:index + 1]


def _resume(method: Method, run: RunDir, checkpoints: list, changes: dict, echo) -> tuple[int, float | None]:
    """Load the newest checkpoint into the method; returns (its step, accuracy before training)."""
    modules, optimizers = method.modules, method.optimizers
    checkpoints = _whole_checkpoints(checkpoints, echo)
    state, extra = _load_changed(checkpoints[-1], modules, optimizers, changes)
    poisoned = non_finite_tensors(modules, optimizers)
    if poisoned:
        earlier = f"Delete it to resume from {checkpoints[-2]}, or pick" if len(checkpoints) > 1 else "Pick"
        raise ConfigError(f"checkpoint {checkpoints[-1]} holds NaN or inf in {len(poisoned)} tensors (first: "
                          f"{poisoned[0]}); training on it would spread them. {earlier} a new output_dir to "
                          "start afresh")
    start = state["step"]
    run.truncate_after(start)
    method.restore(state, extra, run.read_metrics())
    echo(f"resumed from {checkpoints[-1]} (step {start})")
    if changes:
        method.apply_hyperparameters()  # load_state_dict brought back the old ones
        run.append_config_history(start + 1, changes)
        log.warning("config changed from step %d on (train.allow_config_change): %s", start + 1, changes)
        echo(f"config changed from step {start + 1} on: {', '.join(changes)} (recorded in {run.path / 'config_history.jsonl'})")
    return start, state.get("accuracy_before")


def _run(config: Config, run: RunDir, checkpoints: list, changes: dict, echo, method_class, prepared,
         task, reward, scorer, env) -> TrainSummary:
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
    # a method that never samples (reward models) needs only the tokenizer's padding: no worker
    rollout = config.rollout if method_class.generates else config.rollout.model_copy(update={"engine": "hf"})
    engine = build_engine(rollout, model, tokenizer, dtype, seed=config.seed,
                          ray=config.ray if method_class.generates else None)
    try:
        setup = Setup(config, run.path, task, reward, scorer, model, tokenizer, engine, dtype, env)
        method = method_class(setup, prepared)
        try:
            return _loop(config, run, checkpoints, changes, echo, method, setup)
        finally:
            method.close()
    finally:
        engine.close()


def _loop(config: Config, run: RunDir, checkpoints: list, changes: dict, echo, method: Method,
          setup: Setup) -> TrainSummary:
    start, accuracy_before = 0, None
    if config.train.resume and checkpoints:
        start, accuracy_before = _resume(method, run, checkpoints, changes, echo)
        setup.engine.sync_weights(setup.model)  # an engine with its own copy must sample the resumed weights
    else:
        run.truncate_after(-1)
    run.write_config(dump_config(config))
    run.sinks = open_sinks(config.tracking, run.path, start, run.path.name, config.model_dump(mode="json"))
    try:
        return _steps(config, run, start, accuracy_before, echo, method, setup)
    finally:
        if run.sinks is not None:
            run.sinks.close()
        run.sinks = None


def _steps(config: Config, run: RunDir, start: int, accuracy_before: float | None, echo, method: Method,
           setup: Setup) -> TrainSummary:

    def held_out(step: int, label: str) -> float | None:
        if not method.generates:  # e.g. a reward model: only its own held-out metrics
            record = method.held_out(step)
            if not record:  # nothing held out to measure (no eval data)
                return None
            run.log_metrics({"step": step, **record})
            echo(f"held-out ({label}, step {step}): " + ", ".join(f"{k} {v:.3g}" for k, v in record.items()))
            return None
        try:
            result = evaluate(setup.engine, setup.task, setup.scorer, config.eval.limit, config.eval.max_new_tokens,
                              desc=f"eval ({label})", env=setup.env)
        except ScorerError as err:  # stop: what the run wrote so far (metrics, checkpoints) stays as it is
            log.error("held-out evaluation at step %d stopped: %s", step, err)
            raise ScorerError(f"{err}\nThe run stopped at the held-out evaluation {label} (step {step}); {run.path} "
                              "keeps what it wrote so far; train.resume=true continues from its last checkpoint") from None
        kill_point("eval")  # evaluated, not written yet
        # the samples first: the record says the evaluation is whole (a resume redoes one without it)
        run.log_samples([{"step": step, "split": "eval", **r} for r in result.samples[:8]])
        kill_point("eval-samples")  # its samples written, its record not
        run.log_metrics({"step": step, "eval/accuracy": result.accuracy, "eval/n": result.n, **result.metrics,
                         **method.held_out(step)})
        echo(f"held-out greedy accuracy ({label}, step {step}): {result.accuracy:.1%} of {result.n}")
        if result.metrics:  # multi-turn episodes: the first answer's accuracy too
            echo(f"  first-turn accuracy {result.metrics['eval/first_turn_accuracy']:.1%}, "
                 f"mean turns {result.metrics['eval/turns']:.2f}")
        return result.accuracy

    if start == 0 and config.eval.before:
        accuracy_before = held_out(0, "before training")
    # a resumed run's held-out evaluations at its checkpoint's step: those the run made before
    # it stopped are in metrics.jsonl (records without the step's own time/sync_s); one it was
    # stopped in (after the checkpoint, before the record) is made now, as the run would have
    evaluated = {r["step"]: r.get("eval/accuracy") for r in run.read_metrics() if start and r.get("step") == start
                 and "time/step_s" not in r}
    every = config.eval.every
    if start and every and start % every == 0 and start != config.train.steps and start not in evaluated:
        run.drop_samples(start, "eval")  # any an interrupted evaluation wrote before its record
        held_out(start, "during training")

    t_start = time.time()
    bar = tqdm(range(start + 1, config.train.steps + 1), initial=start, total=config.train.steps, desc="train", unit="step")
    saved, in_step, step = start, False, start  # saved: the newest checkpoint's step (0: none)

    def checkpoint(step: int) -> None:
        nonlocal saved
        best = None
        if config.train.keep_best:  # from metrics.jsonl: what a resumed run decides is what a straight one did
            best = best_evaluated_step(run.read_metrics(), {checkpoint_step(p) for p in list_checkpoints(run.checkpoints)})
        save_checkpoint(run.checkpoints, step, method.modules, method.optimizers,
                        {"accuracy_before": accuracy_before, **method.state()}, config.train.keep_checkpoints,
                        method.extra_state(), tokenizer=setup.tokenizer, files=method.checkpoint_files(),
                        keep_also=best)
        saved = step

    try:
        with DeferredInterrupt(echo) as interrupt:
            for step in bar:
                in_step = True
                synced, began, phases = setup.engine.sync_seconds, time.time(), Phases()
                record, examples = method.step(step, phases)
                record.update({**phases.record(), "time/step_s": time.time() - began})
                setup.engine.sync_weights(setup.model)  # the engine samples from the new weights from here on
                # the time this step spent handing weights to the engine (an engine may do it
                # lazily, at its next generate: then it is the previous update's weights)
                record["time/sync_s"] = setup.engine.sync_seconds - synced
                release_freed_memory()
                kill_point("step")  # trained, nothing of the step written yet
                in_step = False
                run.log_metrics(record)
                method.after_step(record, echo)
                run.log_samples([{"step": step, "split": "train", **e} for e in examples[: config.train.log_samples]])
                bar.set_postfix(method.postfix(record))
                every = config.train.checkpoint_every
                if (every and step % every == 0) or step == config.train.steps or interrupt.requested:
                    checkpoint(step)
                if interrupt.requested:
                    raise KeyboardInterrupt
                if config.eval.every and step % config.eval.every == 0 and step != config.train.steps:
                    held_out(step, "during training")
    except KeyboardInterrupt as err:
        bar.close()
        if not in_step and step > saved:  # between steps the state is whole: keep it
            checkpoint(step)
        where = f"during step {step}" if in_step else f"after step {step}"
        raise TrainingInterrupted(interrupted_message(run, where, saved)) from err
    bar.close()
    train_seconds = time.time() - t_start

    method.finish(echo)
    if config.eval.after and start == config.train.steps and start in evaluated:  # made before a stop
        accuracy_after = evaluated[start]
    else:
        if config.eval.after and start == config.train.steps:
            run.drop_samples(start, "eval")
        accuracy_after = held_out(config.train.steps, "after training") if config.eval.after else None
    if accuracy_before is not None and accuracy_after is not None:
        echo(f"held-out greedy accuracy: {accuracy_before:.1%} -> {accuracy_after:.1%} "
             f"({(accuracy_after - accuracy_before) * 100:+.1f} points) after {config.train.steps} steps, "
             f"{train_seconds / 60:.1f} min of training")
    timing = phase_summary(run.read_metrics())
    if timing:
        echo(f"time: {timing}")
    if config.train.report:
        echo(f"report: {write_run_report(run.path)}")
    return TrainSummary(str(run.path), config.train.steps, accuracy_before, accuracy_after, train_seconds)
