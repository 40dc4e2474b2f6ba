"""Ctrl-C during training: the first lets the running step finish and a checkpoint be saved, a
second stops at once; either way the program ends with status 130 and says how to resume."""

from __future__ import annotations

import signal
import threading

from aha.models.checkpoints import checkpoint_step, list_checkpoints
from aha.tracking import RunDir


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
    held = (f"checkpoint {run.checkpoints / f'step-{saved}'} holds step {saved}" if saved
            else "no checkpoint was written yet")
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
