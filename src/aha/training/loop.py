"""The one training loop every method runs in: run folder and lock, resume, atomic
checkpoints, held-out evaluation, metrics, the report and Ctrl-C. What a step does is the
method's (training/methods.py); this file holds no maths.

train() takes the run folder's lock and turns failures into clear errors; _train() builds the
task, reward, model and engine and closes them again; a Run (training/run.py) resumes,
evaluates, saves and steps."""

from __future__ import annotations

import copy
import errno
import logging
import os
import random
import shutil
import socket
from pathlib import Path

import numpy as np
import torch

from aha.config import Config, ConfigError, RayConfig, own_training_data
from aha.envs import build_environment
from aha.eval.scoring import build_scorer
from aha.models import load
from aha.models.adapters import add_lora, trainable_parameters
from aha.models.checkpoints import list_checkpoints
from aha.models.compute import resolve_dtype
from aha.models.loading import lasting_name, model_on_meta
from aha.rewards import build_reward
from aha.rewards.mixture import build_mixture_reward
from aha.rollout import build_engine
from aha.tasks import build_task
from aha.tracking import RunDir
from aha.tracking.run_dir import RunWriteError, free_space
from aha.tracking.run_identity import resume_changes
from aha.tracking.run_lock import RunLock, RunLocked
from aha.training.distributed import Ranks, close_ranks, join_ranks, shared
from aha.training.interrupt import StopSignals, TrainingInterrupted, interrupted_message, stop_code
from aha.training.method import Setup
from aha.training.methods import method_for
from aha.training.placement import on_meta
from aha.training.run import Run, TrainSummary
from aha.training.shards import Shards

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _unwritable(err: OSError, folder: Path) -> RunWriteError:
    return RunWriteError(f"cannot write the run folder {folder}: {err.strerror or err} ({err.filename}; "
                         f"{free_space(folder if folder.exists() else folder.parent)}): make room or make it "
                         "writable, then run again (train.resume=true continues from its last checkpoint)")


def died_silently(lock: RunLock) -> str:
    """What a run.lock left behind by a dead process means: every way aha stops (an error, Ctrl-C,
    SIGTERM, SIGHUP) removes it, so its process was killed without warning."""
    who = f"PID {lock.stale.get('pid')}" if lock.stale else "its process"
    return (f"note: the previous process of {lock.path.parent} ({who}) ended without a word: it left {lock.path} "
            "behind, which only SIGKILL, the kernel's out-of-memory killer (see `dmesg` or `journalctl -k`) or a lost "
            "machine do; if memory ran out, lower rollout.group_size, rollout.prompts_per_step or "
            "train.micro_batch_size")


def train(config: Config, echo=print) -> TrainSummary:
    """Train with config.method; the run folder is config.output_dir. Under torchrun every rank
    calls this: rank 0 owns the run folder, the others train beside it (training/run.py)."""
    ranks = join_ranks(config)
    try:
        with StopSignals():  # SIGTERM and SIGHUP stop the run as Ctrl-C does, not silently
            if ranks.is_main:
                summary = _train_main(config, echo, ranks)
            else:
                summary = _train(config, None, [], {}, lambda *_: None, ranks)
    except TrainingInterrupted:
        raise
    except KeyboardInterrupt as err:  # another rank, outside the steps: rank 0 says how to resume
        raise TrainingInterrupted(f"learner rank {ranks.rank} stopped", stop_code(err)) from err
    except RuntimeError as err:
        if ranks.distributed and "Timed out" in str(err):  # gloo's and NCCL's words for a collective's timeout
            waited = config.distributed.timeout_s
            raise RuntimeError(f"learner rank {ranks.rank} waited distributed.timeout_s={waited:g} s in a collective "
                               "for a peer that did not answer: a rank stalled or its host is gone, or rank 0's own "
                               "work between two collectives (sampling a step, a held-out evaluation, a checkpoint) "
                               f"took longer than that, and then raise distributed.timeout_s: {err}") from err
        raise
    close_ranks(ranks)  # only after a run that ended well: a failed rank's peers are stopped by torchrun
    return summary


def _train_main(config: Config, echo, ranks: Ranks) -> TrainSummary:
    """Rank 0 (the one process): the run folder's lock, resume's checks, failures made clear."""
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
            echo(died_silently(lock))
        checkpoints = list_checkpoints(run.checkpoints)
        if run.metrics_path.exists() and not config.train.resume:
            raise ConfigError(f"output_dir {run.path} already holds a run; pick another output_dir or set "
                              "train.resume=true")
        # only a resume from a checkpoint continues the old run; without one the run starts afresh
        changes, measured = resume_changes(run.path, config) if config.train.resume and checkpoints else ({}, [])
        if measured:
            log.warning("held-out evaluation settings changed on resume: %s", measured)
            echo(f"note: {', '.join(measured)} changed since the run's config.yaml: held-out accuracies logged "
                 "before this resume were measured with the old settings")
        return _train(config, run, checkpoints, changes, echo, ranks)
    except RunLocked:  # this log.txt is the live run's: say who knocked, not that training stopped
        log.warning("process %d on %s was refused: the run is held by another process", os.getpid(),
                    socket.gethostname())
        raise
    except TrainingInterrupted as err:
        log.error("%s", err, exc_info=True)
        echo(str(err))
        raise
    except KeyboardInterrupt as err:  # outside the steps (loading, held-out evaluation, report)
        stop = TrainingInterrupted(interrupted_message(run, "", None, config), stop_code(err))
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


def _train(config: Config, run: RunDir | None, checkpoints: list, changes: dict, echo, ranks: Ranks
           ) -> TrainSummary:
    """Build what the run needs (whatever can fail on bad input before the slow model load),
    run it, and close what it held, the newest first. run is None on ranks other than 0."""
    seed_everything(config.seed)
    method_class = method_for(config)
    task = build_task(config.task, config.base_dir)
    # rank 0 alone scores: the other ranks' rewards (and gold rewards, in prepare) start no Ray workers
    here = config if ranks.is_main else config.model_copy(update={"ray": RayConfig()})
    # reward: [] is allowed when the policy is its own referee (config.referee): its score is the reward
    if config.task.mixture:  # each task's own reward list, each row scored by its task's
        reward = build_mixture_reward(config.task.mixture, config.base_dir, dtype=config.train.dtype, ray=here.ray,
                                      device=config.device)
    else:
        reward = build_reward(config.reward, config.base_dir, dtype=config.train.dtype, ray=here.ray,
                              device=config.device,
                              empty_ok=config.referee.verifier is not None or config.likelihood_reward.weight != 0)
    prepared = engine = None
    try:
        prepared = method_class.prepare(here, task, reward)
        scorer = build_scorer(config, reward)  # held-out accuracy: by default the run's own reward
        env = build_environment(config.env, reward, config.base_dir)
        model, tokenizer, dtype = _load_policy(config, task, ranks)
        # rank 0 keeps the policy whole for its engine while the ranks shard `model` (the method places it)
        whole = copy.deepcopy(model) if ranks.distributed and ranks.is_main and method_class.generates else None
        # a method that never samples (reward models) needs only the tokenizer's padding: no worker;
        # nor do the ranks other than 0, which never sample
        samples = method_class.generates and ranks.is_main
        rollout = config.rollout if samples else config.rollout.model_copy(update={"engine": "hf"})
        engine = build_engine(rollout, whole or model, tokenizer, dtype, seed=config.seed,
                              ray=config.ray if samples else None)
        setup = Setup(config, run.path if run else Path(config.output_dir), task, reward, scorer, model, tokenizer,
                      engine, dtype, env, Shards(ranks, config.distributed.strategy), whole)
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
        if ranks.is_main and (config.ray.rollout_workers or config.ray.reward_workers):
            from aha.ray_cluster import release_ray

            release_ray()  # a local cluster this run started goes with it


def _load_policy(config: Config, task, ranks: Ranks = Ranks()) -> tuple[torch.nn.Module, object, torch.dtype]:
    """The policy on the rank's device (with LoRA adapters when lora.rank is set), its tokenizer
    and the compute dtype. Every model the run builds from the policy (reference, critic, rank
    0's whole copy) is a copy of it, on the same device. With several learner ranks only rank 0
    loads the weights; the others build its architecture on the meta device (no data), and take
    their shards of rank 0's weights when the method places the model."""
    device = ranks.device
    if ranks.distributed and not ranks.is_main:
        architecture, generation, tokenizer, name = shared(None, ranks)
        model = model_on_meta(architecture, generation)
    else:
        loaded = load(config.model, seed=config.seed)
        model, tokenizer, name = loaded.model, loaded.tokenizer, loaded.name
        if ranks.distributed:
            shared((model.config, model.generation_config, tokenizer, name), ranks)
    if config.lora.rank:
        add_lora(model, config.lora.rank, config.lora.alpha, config.lora.dropout, config.lora.target_modules,
                 base=lasting_name(config.model))
        trainable = sum(p.numel() for p in trainable_parameters(model))
        log.info("LoRA rank %d on %s: %d trainable parameters of %d", config.lora.rank, config.lora.target_modules,
                 trainable, sum(p.numel() for p in model.parameters()))
    if not on_meta(model):
        model.to(device)
    dtype = resolve_dtype(config.train.dtype, device)
    own = own_training_data(config)
    data = (f"trains on {own}" if own else f"task {task.name}: {len(task.train)} train") + (
        f", {len(task.eval)} held-out prompts of task {task.name}" if config.eval.greedy else "")
    log.info("method %s, model %s on %s, compute dtype %s, %s", config.method, name, device, dtype, data)
    return model, tokenizer, dtype
