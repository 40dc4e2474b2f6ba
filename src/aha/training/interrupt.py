"""Stopping a run from outside: Ctrl-C (SIGINT), and SIGTERM and SIGHUP, which SLURM, Kubernetes,
`timeout` and a closed terminal send. The first lets the running step finish and a checkpoint be
saved, a second stops at once; outside the steps (loading, held-out evaluation) any of them stops
at once. Either way the run says how to resume, writes it to log.txt, releases run.lock, and the
program ends with status 128 + the signal's number (130 for Ctrl-C)."""

from __future__ import annotations

import shlex
import signal
import threading

from aha.errors import SignalStop
from aha.models.checkpoints import checkpoint_step, list_checkpoints
from aha.rewards.functions import IN_PROCESS
from aha.tracking import RunDir

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped by a signal: a KeyboardInterrupt (what a notebook user expects from an
    interrupted cell), with the exit status the command ends with and a message saying how to resume."""

    def __init__(self, message: str, code: int = 128 + signal.SIGINT):
        super().__init__(message)
        self.message, self.code = message, code

    def __str__(self) -> str:
        return self.message


def _raise_stop(signum, frame) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SignalStop(signum)


def stop_code(err: BaseException) -> int:
    """The exit status of a run stopped by err: 128 + the signal's number, 130 for Ctrl-C."""
    while err is not None:
        if isinstance(err, SignalStop):
            return 128 + err.signum
        err = err.__context__
    return 128 + signal.SIGINT


def resume_command(config, run: RunDir) -> str:
    """The command that continues the run: the user's own file and overrides where the config came
    from a file (config.origin), else the run's config.yaml, which holds every setting it ran with;
    a run with Python rewards lent by aha.train (python:<name>) resumes only from that call."""
    lent = sorted({spec.fn for spec in _reward_specs(config) if (spec.fn or "").startswith(IN_PROCESS)})
    if lent:
        return (f"the same aha.train(...) call with train__resume=True (its Python rewards {', '.join(lent)} exist "
                "only in that call; `aha train` cannot find them)")
    path, overrides = getattr(config, "origin", (None, ()))
    if path is None:
        path, overrides = str(run.path / "config.yaml"), ()
    kept = [o for o in overrides if not o.replace(" ", "").startswith("train.resume=")]
    return shlex.join(["aha", "train", path, *kept, "train.resume=true"])


def _reward_specs(config) -> list:
    """Every reward component of config: the run's and each mixture task's (none without a config)."""
    if config is None:
        return []
    return [*config.reward, *(spec for entry in config.task.mixture for spec in entry.reward or ())]


def interrupted_message(run: RunDir, where: str, saved: int | None, config=None) -> str:
    """saved: the step of the newest checkpoint (0: none), None: see the checkpoints folder."""
    if saved is None:
        kept = list_checkpoints(run.checkpoints)
        saved = checkpoint_step(kept[-1]) if kept else 0
    held = (f"checkpoint {run.checkpoints / f'step-{saved}'} holds step {saved}" if saved
            else "no checkpoint was written yet")
    return (f"aha: training interrupted{' ' + where if where else ''}; {held}. Continue with: "
            f"{resume_command(config, run)} (output_dir {run.path})")


def heeded(signals) -> list:
    """The signals to handle here: none outside the main thread (Python handles signals there
    only), and not one this process was told to ignore (`nohup` ignores SIGHUP)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    return [s for s in signals if signal.getsignal(s) != signal.SIG_IGN]


class StopSignals:
    """Within it, SIGTERM and SIGHUP raise as Ctrl-C does (a SignalStop, a KeyboardInterrupt), so a
    run they stop ends as an interrupted one, not silently; the previous handlers come back on exit.
    Outside the main thread (a notebook's worker, a test's thread) it does nothing."""

    def __enter__(self) -> "StopSignals":
        self._previous = {s: signal.signal(s, _raise_stop) for s in heeded(STOP_SIGNALS[1:])}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


class DeferredInterrupt:
    """Within it, the first Ctrl-C, SIGTERM or SIGHUP lets the running step finish, so the checkpoint
    saved after it resumes exactly; a second stops at once. Outside the main thread it does nothing."""

    def __init__(self, echo):
        self.requested, self._echo, self._previous = False, echo, {}
        self.signum = signal.SIGINT

    def __enter__(self) -> "DeferredInterrupt":
        self._previous = {s: signal.signal(s, self._handle) for s in heeded(STOP_SIGNALS)}
        return self

    def _handle(self, signum, frame) -> None:
        self.requested, self.signum = True, signum
        for s in self._previous:  # the next one, of any kind, stops at once
            signal.signal(s, signal.default_int_handler if s == signal.SIGINT else _raise_stop)
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        self._echo(f"\n{name}: finishing this step and saving a checkpoint (Ctrl-C again to stop at once)")

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
