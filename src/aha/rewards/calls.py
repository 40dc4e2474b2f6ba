"""Calling a user's reward function as the composition does: what it is given, what counts as
its score, and what it may raise. Shared by the composition and its worker processes; it
imports no torch.

- completion_tokens: the tokens the policy generated for the completion, given (as a keyword)
  only to a function whose signature names it; a length measured in words or characters can
  be cut by text that costs tokens but is no word (zero-width characters between words).
- A score is a real number (an int, a float, numpy's, a 0-d array or tensor, a Decimal), a
  bool (a verifier's True/False is 1/0), a dict of them, StepScores or Logged. A string is refused,
  never parsed: float("1e30") would make what a reward returns as text its score.
- Whatever an in-process reward raises is its failure on that sample, SystemExit,
  KeyboardInterrupt and GeneratorExit too (a pooled reward that raises them loses its worker,
  which fails the sample as well). A real Ctrl-C still stops the run: SigintWatch tells it
  from a KeyboardInterrupt the reward raised itself.
"""

from __future__ import annotations

import decimal
import inspect
import numbers
import signal
import threading
from dataclasses import dataclass
from typing import Callable

from aha.errors import SignalStop
from aha.rewards.functions import Logged, StepScores

TOKENS = "completion_tokens"


@dataclass
class Outcome:
    value: object = None  # what the function returned
    error: str | None = None  # why it has no value (raised, timed out, worker died)


def takes_tokens(fn: Callable) -> bool:
    """Whether fn's signature names completion_tokens (a keyword it can be given)."""
    try:
        parameter = inspect.signature(fn).parameters.get(TOKENS)
    except (TypeError, ValueError):  # a callable without a signature Python can read
        return False
    return parameter is not None and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)


def as_number(value) -> float:
    """value as a float when it is a real number or a bool; TypeError for anything else (a
    string, bytes, None, a list, a complex number)."""
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(f"a {type(value).__name__} is not a number")
    if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
        value = value.item()  # a 0-d numpy array or torch tensor: the Python value it holds (a str stays one)
        if isinstance(value, (str, bytes)):
            raise TypeError(f"a {type(value).__name__} is not a number")
    if not isinstance(value, (numbers.Real, decimal.Decimal, StepScores, Logged)):  # bool is an int: 1 or 0
        raise TypeError(f"a {type(value).__name__} is not a real number")
    return float(value)


def score_parts(name: str, value) -> dict[str, float]:
    """A component's value as {part name: number}: {name: v}, or {name/key: v} per key of a dict."""
    if isinstance(value, dict):
        if not all(type(k) is str for k in value):  # 1 and "1" would both be name/1
            raise TypeError("a dict of scores has string keys")
        return {f"{name}/{k}": as_number(v) for k, v in value.items()}
    return {name: as_number(value)}


def describe(err: BaseException) -> str:
    """'Type: message' of an exception whose own __str__ may raise too (it is the reward's code)."""
    try:
        return f"{type(err).__name__}: {err}"
    except BaseException:  # noqa: BLE001 - a message that cannot be made must not stop the run either
        return f"{type(err).__name__}: <its message raised>"


def shown(value) -> str:
    """repr(value), or a stand-in when the reward's own __repr__ raises."""
    try:
        return repr(value)[:200]
    except BaseException:  # noqa: BLE001
        return f"<a {type(value).__name__}>"


def call_guarded(fn: Callable, *args, **kwargs) -> Outcome:
    """fn's value, or whatever it raised as the error: a reward must not stop the run."""
    try:
        return Outcome(value=fn(*args, **kwargs))
    except SignalStop:  # SIGTERM or SIGHUP stopping the run, raised by aha's handler, never the reward's
        raise
    except BaseException as err:  # noqa: BLE001 - SystemExit and the rest are failures too (SigintWatch)
        return Outcome(error=describe(err))


class SigintWatch:
    """Within it, SIGINT goes through a handler that notes a KeyboardInterrupt the previous
    handler raised (a real Ctrl-C: Python's default handler, or training's second one) before
    passing it on; check() raises it again even where the reward caught it. A KeyboardInterrupt
    with no SIGINT behind it is the reward's own. A handler that the previous one installs
    (training's first Ctrl-C arms the default one) is kept and stays in place after. Outside
    the main thread it does nothing: signals are handled in the main thread only."""

    def __init__(self):
        self.raised: KeyboardInterrupt | None = None
        self.previous = None
        self._handler = self._handle  # one bound method, to know it when installed

    def __enter__(self) -> "SigintWatch":
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous is not None:  # None: a handler set outside Python, which could not be restored
                self.previous = previous
                signal.signal(signal.SIGINT, self._handler)
        return self

    def _handle(self, signum, frame) -> None:
        handler = self.previous
        try:
            if handler in (signal.SIG_DFL, None):
                signal.default_int_handler(signum, frame)
            elif handler != signal.SIG_IGN:
                handler(signum, frame)
        except KeyboardInterrupt as err:
            self.raised = err
            raise
        finally:
            current = signal.getsignal(signal.SIGINT)
            if current != self._handler:  # the handler replaced itself: pass the next SIGINT to its successor
                self.previous = current
                signal.signal(signal.SIGINT, self._handler)

    def check(self) -> None:
        """Raise the KeyboardInterrupt a real Ctrl-C raised during the calls so far."""
        if self.raised is not None:
            raise self.raised

    def __exit__(self, *exc) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
