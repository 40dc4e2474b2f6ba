"""One run in progress: resume, held-out evaluation, checkpoints and the steps, for any method.
training/loop.py builds what a run needs and hands it a Run; this file holds no maths.

With several learner ranks every rank runs the same Run, so that their collective calls meet:
rank 0 alone reads and writes the run folder, evaluates and reports, and hands the other ranks
what it decided (the checkpoint resumed, the evaluations owed) and what they must hold alike
(the random state at each step)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from aha.config import Config, ConfigError, dump_config
from aha.eval import evaluate
from aha.eval.runner import by_task
from aha.eval.scoring import ScorerError
from aha.models.checkpoints import checkpoint_step, list_checkpoints
from aha.models.compute import release_freed_memory
from aha.tracking import RunDir
from aha.tracking.faults import kill_point
from aha.tracking.run_report import write_run_report
from aha.tracking.sinks import open_sinks
from aha.training.checkpoint import (
    agreed_rng_state,
    best_evaluated_step,
    load_changed,
    non_finite_tensors,
    save_checkpoint,
    whole_checkpoints,
)
from aha.training.distributed import peak_memory, shared
from aha.training.interrupt import DeferredInterrupt, TrainingInterrupted, interrupted_message, stop_code
from aha.training.method import Method, Setup
from aha.training.phases import Phases, phase_summary
from aha.training.shards import full_optimizer_state

log = logging.getLogger(__name__)


@dataclass
class TrainSummary:
    run_dir: str
    steps: int
    accuracy_before: float | None
    accuracy_after: float | None
    train_seconds: float


NOTHING_HELD_OUT = ("note: no held-out evaluation: this run names no task to measure greedy accuracy on "
                    "(task.name or task.data with task.eval_data or task.eval_fraction), and its method has no "
                    "held-out data of its own (dpo.eval_data or dpo.eval_fraction, rm.eval_data, prm.eval_data)")


class Run:
    """One run in progress: the method and what it trains (setup), the run folder, the step a
    resume starts from, the newest checkpoint's step and the accuracy before training."""

    def __init__(self, config: Config, folder: RunDir | None, method: Method, setup: Setup, echo):
        self.config, self.folder, self.method, self.setup, self.echo = config, folder, method, setup, echo
        self.ranks = setup.shards.ranks
        self.main = self.ranks.is_main  # folder is None on the other ranks
        self.start = 0  # the step the run resumes after (0: a fresh run)
        self.saved = 0  # the newest checkpoint's step (0: none)
        self.accuracy_before: float | None = None

    def run(self, checkpoints: list[Path], changes: dict) -> TrainSummary:
        """Resume (or start afresh), then evaluate, train and evaluate, metrics sinks open throughout."""
        config, folder = self.config, self.folder
        if shared(config.train.resume and bool(checkpoints), self.ranks):
            self.resume(checkpoints, changes)
            # an engine with its own copy must sample the resumed weights
            self.sync_engine()
        elif self.main:
            folder.truncate_after(-1)
        if not self.main:
            return self.follow()
        folder.write_config(dump_config(config))
        folder.sinks = open_sinks(config.tracking, folder.path, self.start, folder.path.name,
                                  config.model_dump(mode="json"))
        try:
            evaluated = self.evaluate_before()
            began = time.time()
            self.steps()
            return self.finish(evaluated, time.time() - began)
        finally:
            if folder.sinks is not None:
                folder.sinks.close()
            folder.sinks = None

    def follow(self) -> TrainSummary:
        """A rank other than 0: the same evaluations, steps and checkpoints, in the same order,
        for their collective parts only (rank 0 tells it which evaluations are owed)."""
        evaluated = self.evaluate_before()
        began = time.time()
        self.steps()
        return self.finish(evaluated, time.time() - began)

    def sync_engine(self) -> None:
        """Rank 0's engine samples the trained weights from its next generate on."""
        if self.main and self.setup.whole is not None:  # None: a reward model's run on several ranks
            self.setup.engine.sync_weights(self.setup.whole)

    def resume(self, checkpoints: list[Path], changes: dict) -> None:
        """Load the newest whole checkpoint into the method and cut the run's files back to its step."""
        method, folder, echo = self.method, self.folder, self.echo
        changes = shared(changes, self.ranks)  # every rank's optimizers take a changed learning rate alike
        checkpoints = whole_checkpoints(checkpoints, echo) if self.main else [None]
        state, extra = load_changed(checkpoints[-1], method.modules, method.optimizers, changes, self.ranks)
        self.setup.shards.push()  # every rank's shards from rank 0's loaded copies
        start = self.start = self.saved = state["step"]
        moments = self.optimizer_states()  # a sharded optimizer's moments are checked gathered whole
        if not self.main:
            method.restore(state, extra, shared(None, self.ranks))
            if changes:
                method.apply_hyperparameters()
            return
        poisoned = non_finite_tensors(method.modules, moments)
        if poisoned:
            earlier = f"Delete it to resume from {checkpoints[-2]}, or pick" if len(checkpoints) > 1 else "Pick"
            raise ConfigError(f"checkpoint {checkpoints[-1]} holds NaN or inf in {len(poisoned)} tensors (first: "
                              f"{poisoned[0]}); training on it would spread them. {earlier} a new output_dir to "
                              "start afresh")
        folder.truncate_after(start)
        method.restore(state, extra, shared(folder.read_metrics(), self.ranks))
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
        evaluated = shared({r["step"]: r.get("eval/accuracy") for r in self.folder.read_metrics()
                            if start and r.get("step") == start and "time/step_s" not in r} if self.main else None,
                           self.ranks)
        every = config.eval.every
        if start and every and start % every == 0 and start != config.train.steps and start not in evaluated:
            if self.main:
                self.folder.drop_samples(start, "eval")  # any an interrupted evaluation wrote before its record
            self.evaluate(start, "during training")
        return evaluated

    def evaluate(self, step: int, label: str) -> float | None:
        """A held-out evaluation: greedy accuracy (or the method's own metrics), its samples first."""
        method, setup, config, folder, echo = self.method, self.setup, self.config, self.folder, self.echo
        if not self.main:  # rank 0 generates and scores alone; a method's own held-out metrics may be collective
            method.held_out(step)
            return None
        if not method.generates or not config.eval.greedy:  # e.g. a reward model: only its own held-out metrics
            record = method.held_out(step)
            if not record:  # nothing held out to measure (no eval data)
                if label == "before training" or (step == config.train.steps and not config.eval.before):
                    echo(NOTHING_HELD_OUT)
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
                              "keeps what it wrote so far; train.resume=true continues from its last "
                              "checkpoint") from None
        kill_point("eval")  # evaluated, not written yet
        # the samples first: the record says the evaluation is whole (a resume redoes one without it)
        folder.log_samples([{"step": step, "split": "eval", **r} for r in result.samples[:8]])
        kill_point("eval-samples")  # its samples written, its record not
        folder.log_metrics({"step": step, "eval/accuracy": result.accuracy, "eval/n": result.n, **result.metrics,
                            **method.held_out(step)})
        echo(f"held-out greedy accuracy ({label}, step {step}): {result.accuracy:.1%} of {result.n}")
        if by_task(result.metrics):  # a task mixture: each task's accuracy too
            echo(f"  by task: {by_task(result.metrics)}")
        if "eval/first_turn_accuracy" in result.metrics:  # multi-turn episodes: the first answer's accuracy too
            echo(f"  first-turn accuracy {result.metrics['eval/first_turn_accuracy']:.1%}, "
                 f"mean turns {result.metrics['eval/turns']:.2f}")
        return result.accuracy

    def optimizer_states(self) -> dict:
        """Each optimizer's state dict, gathered whole on rank 0 (None elsewhere). Collective."""
        return {name: full_optimizer_state(optimizer, self.ranks) for name, optimizer in self.method.optimizers.items()}

    def save(self, step: int) -> None:
        """A checkpoint of this step (keep_best: the best evaluated one is kept beside the newest)."""
        config, method, folder = self.config, self.method, self.folder
        optimizers = self.optimizer_states()  # rank 0 writes what one process would
        if not self.main:
            self.saved = step
            return
        best = None
        if config.train.keep_best:  # from metrics.jsonl: what a resumed run decides is what a straight one did
            best = best_evaluated_step(folder.read_metrics(),
                                       {checkpoint_step(p) for p in list_checkpoints(folder.checkpoints)})
        save_checkpoint(folder.checkpoints, step, method.modules, optimizers,
                        {"accuracy_before": self.accuracy_before, **method.state()}, config.train.keep_checkpoints,
                        method.extra_state(), tokenizer=self.setup.tokenizer, files=method.checkpoint_files(),
                        keep_also=best)
        self.saved = step

    def steps(self) -> None:
        """The steps from the resumed one to train.steps: each step's record and samples, its
        checkpoint and evaluation when due. The first Ctrl-C finishes the step and saves it."""
        config, folder = self.config, self.folder
        bar = tqdm(range(self.start + 1, config.train.steps + 1), initial=self.start, total=config.train.steps,
                   desc="train", unit="step", disable=not self.main)
        in_step, step = False, self.start
        try:
            with DeferredInterrupt(self.echo) as interrupt:
                for step in bar:
                    in_step = True
                    record, examples = self.step(step)
                    kill_point("step")  # trained, nothing of the step written yet
                    in_step = False
                    if self.main:
                        folder.log_metrics(record)
                        self.method.after_step(record, self.echo)
                        folder.log_samples([{"step": step, "split": "train",
                                             **e} for e in examples[: config.train.log_samples]])
                        bar.set_postfix(self.method.postfix(record))
                    every = config.train.checkpoint_every
                    stop = shared(interrupt.requested, self.ranks)  # rank 0's Ctrl-C stops every rank after this step
                    if (every and step % every == 0) or step == config.train.steps or stop:
                        self.save(step)
                    if stop:
                        raise KeyboardInterrupt
                    if config.eval.every and step % config.eval.every == 0 and step != config.train.steps:
                        self.evaluate(step, "during training")
        except KeyboardInterrupt as err:
            bar.close()
            if not in_step and step > self.saved:  # between steps the state is whole: keep it
                self.save(step)
            where = f"during step {step}" if in_step else f"after step {step}"
            code = 128 + interrupt.signum if interrupt.requested else stop_code(err)
            if not self.main:  # rank 0 says how to resume; the run folder is its
                raise TrainingInterrupted(f"learner rank {self.ranks.rank} stopped {where}", code) from err
            raise TrainingInterrupted(interrupted_message(folder, where, self.saved, config), code) from err
        bar.close()

    def step(self, step: int) -> tuple[dict, list[dict]]:
        """One of the method's steps, timed: each phase as time/<phase>_s, the whole as time/step_s."""
        engine = self.setup.engine
        synced, began, phases = engine.sync_seconds, time.time(), Phases()
        agreed_rng_state(self.ranks)  # rank 0 sampled alone since the last step: every rank draws alike again
        record, examples = self.method.step(step, phases)
        record.update({**phases.record(), "time/step_s": time.time() - began})
        self.setup.shards.refresh()  # rank 0's whole copy takes the new weights from the shards
        self.sync_engine()  # the engine samples from the new weights from here on
        # the time this step spent handing weights to the engine (an engine may do it
        # lazily, at its next generate: then it is the previous update's weights)
        record["time/sync_s"] = engine.sync_seconds - synced
        release_freed_memory()
        return record, examples

    def finish(self, evaluated: dict, train_seconds: float) -> TrainSummary:
        """The method's last words, the held-out evaluation after training, the summary and the report."""
        config, echo, steps = self.config, self.echo, self.config.train.steps
        if self.main:
            self.method.finish(echo)
        if config.eval.after and self.start == steps and self.start in evaluated:  # made before a stop
            accuracy_after = evaluated[self.start]
        else:
            if config.eval.after and self.start == steps and self.main:
                self.folder.drop_samples(self.start, "eval")
            accuracy_after = self.evaluate(steps, "after training") if config.eval.after else None
        if self.ranks.distributed or self.ranks.device.type == "cuda":
            echo(peak_memory(self.ranks))  # collective
        if not self.main:
            return TrainSummary("", steps, None, None, train_seconds)
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
