"""Loud failures: a reward that keeps failing, or steps that train nothing, are said on the
console as they happen, summed up at the end, and can stop the run. A run that finishes
normally while its reward failed on every sample would publish numbers that mean nothing."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from aha.rewards import RewardFailureError
from aha.tracking.run_report import failure_counts


def samples_scored(record: dict) -> int:
    """How many samples the step's reward scored (the record keeps the failures and their share)."""
    return round(record["reward/failed"] / record["reward/failed_frac"]) if record.get("reward/failed") else 0


def describe_failures(record: dict, first_errors: dict[str, str]) -> str:
    """'score on 48 of 48 samples (first error on sample 3: TypeError: ...)', one per component."""
    sampled = samples_scored(record)
    parts = []
    for name, count in failure_counts(record).items():
        first = first_errors.get(name)
        parts.append(f"{name} on {count} of {sampled} samples" + (f" (first error {first})" if first else ""))
    return "; ".join(parts)


def check_reward_failures(record: dict, limit: float, first_errors: dict[str, str], step: int) -> None:
    """Raise RewardFailureError when the share of the step's samples on which some reward
    component failed exceeds `limit` (train.max_reward_failure_rate)."""
    rate = record.get("reward/failed_frac", 0.0)
    if rate <= limit:
        return
    raise RewardFailureError(
        f"step {step}: the reward failed on {record['reward/failed']} of {samples_scored(record)} samples "
        f"({rate:.0%}), "
        f"more than train.max_reward_failure_rate={limit:g}: {describe_failures(record, first_errors)}. The run "
        "stopped "
        f"before this step's update; log.txt has each failing sample. Fix the reward function, or set "
        f"train.max_reward_failure_rate=1.0 to train on with failed samples scored 0")


@dataclass
class Alarms:
    """What the console is told during a run, and the summary at its end."""

    max_idle_steps: int | None
    failed_samples: Counter = field(default_factory=Counter)
    failing_steps: int = 0
    idle_steps: int = 0
    idle_streak: int = 0
    steps: int = 0

    def observe(self, record: dict, first_errors: dict[str, str], echo) -> None:
        """Called with every step's record after it is logged."""
        step = record["step"]
        self.steps += 1
        counts = failure_counts(record)
        if counts:
            if not self.failing_steps:
                echo(f"warning: step {step}: the reward failed on {describe_failures(record, first_errors)}; "
                     "those samples score 0 (log.txt has each; the report counts them)")
            self.failing_steps += 1
            self.failed_samples.update(counts)
        if record.get("train/nothing_to_train"):
            if not self.idle_steps:
                echo(f"warning: step {step} had nothing to train on: every advantage was zero (each group's rewards "
                     "were equal), so the reward taught nothing; see groups/zero_variance_frac "
                     "(algorithm.dynamic_sampling samples more prompts instead)")
            self.idle_steps += 1
            self.idle_streak += 1
            if self.max_idle_steps is not None and self.idle_streak >= self.max_idle_steps:
                raise RewardFailureError(
                    f"step {step}: {self.idle_streak} steps in a row had nothing to train on (train.max_idle_steps="
                    f"{self.max_idle_steps}): every advantage was zero. The reward may be constant on what "
                    "this model writes (too hard, too easy, or broken); check samples.jsonl")
        else:
            self.idle_streak = 0

    def summary(self) -> list[str]:
        """Lines for the end of the run (none when nothing went wrong)."""
        lines = []
        if self.failed_samples:
            each = ", ".join(f"{name} on {n} samples" for name, n in self.failed_samples.items())
            lines.append(f"warning: the reward failed in {self.failing_steps} of {self.steps} steps ({each}); "
                         "those samples scored 0")
        if self.idle_steps:
            lines.append(f"warning: {self.idle_steps} of {self.steps} steps had nothing to train on (every advantage "
                         "zero)")
        return lines
