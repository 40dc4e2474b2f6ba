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
    """'generate 1.20 s, score 0.05 s, update 2.31 s a step': the mean of each time/<phase>_s
    over the steps' records (a phase a step skipped counts as 0 there), for the console."""
    steps = [r for r in records if "time/step_s" in r]
    names = [k for k in dict.fromkeys(k for r in steps for k in r) if k.startswith("time/") and k.endswith("_s")]
    if not steps:
        return ""
    means = {n.removeprefix("time/").removesuffix("_s"): sum(r.get(n, 0.0) for r in steps) / len(steps) for n in names}
    return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in means.items()) + " a step"
