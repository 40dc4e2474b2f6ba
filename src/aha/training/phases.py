"""Named, timed phases of a training step: `with phases("generate"): ...` adds the seconds
spent inside to that phase, and the loop writes each as time/<phase>_s in metrics.jsonl (a
phase entered twice in a step, as a second dynamic-sampling round, counts both)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Phases:
    """The seconds each named phase of one step took, in the order the phases were first entered."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - began

    def exclude(self, name: str, seconds: float) -> None:
        """Take out of a phase time that is recorded on its own (an engine that takes new
        weights at its first generate: that is time/sync_s, not generation)."""
        if name in self.seconds:
            self.seconds[name] -= seconds

    def record(self) -> dict[str, float]:
        return {f"time/{name}_s": seconds for name, seconds in self.seconds.items()}


def phase_summary(records: list[dict]) -> str:
    """'6.38 s a step (generate 3.64, score 0.00, update 2.73, sync 0.00)': the mean of
    time/step_s and of each other time/<name>_s over the steps' records (a phase a step
    skipped counts as 0 there), for the console."""
    steps = [r for r in records if "time/step_s" in r]
    if not steps:
        return ""
    names = [k for k in dict.fromkeys(k for r in steps for k in r)
             if k.startswith("time/") and k.endswith("_s") and k != "time/step_s"]
    mean = lambda key: sum(r.get(key, 0.0) for r in steps) / len(steps)
    parts = ", ".join(f"{n.removeprefix('time/').removesuffix('_s')} {mean(n):.2f}" for n in names)
    return f"{mean('time/step_s'):.2f} s a step ({parts})"
