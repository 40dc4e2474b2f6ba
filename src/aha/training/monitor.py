"""The reward-hacking monitor: watch, during training, for the signs that the policy is
gaming its reward rather than getting better.

Each step it scores the step's completions with a held-out gold reward (never trained on)
and measures repetition, then compares every series with its own start (the mean of the
first baseline_steps steps), smoothed over `window` steps. A flag fires when its
condition has held for `patience` consecutive steps, and records the step it started:
- gap: the trained reward has gained gap_threshold more than the gold reward (in the
  rewards' own units: size it to the trained reward's range);
- gold_drop: the trained reward has gained while the gold reward fell below
  (1 - gold_drop) of its start (scale-free: the overoptimisation curve's turn);
- repetition: the repeated n-gram fraction has risen by repetition_rise;
- length: the mean length has grown by length_factor;
- format_only: the format components have gained format_gain while gold gained less than
  gold_gain_min.
The series are all in metrics.jsonl, so a resumed run rebuilds the monitor from them.
monitor.json in the run folder holds the baseline and the flags (rewritten each step).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from aha.config import MonitorConfig
from aha.rewards import CompositeReward, RewardResult

log = logging.getLogger(__name__)

TRAIN, GOLD, REPETITION, LENGTH = "reward/verifier_mean", "monitor/gold_mean", "monitor/repetition", "length/mean"
FORMAT = "monitor/format"


def repeated_ngram_fraction(text: str, n: int = 4) -> float:
    """Share of the word n-grams of text that repeat an earlier one: 0 for text with no
    repeats (or fewer than n+1 words), approaching 1 for a phrase said over and over."""
    words = text.split()
    grams = [tuple(words[i: i + n]) for i in range(len(words) - n + 1)]
    if len(grams) < 2:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


@dataclass
class Flag:
    step: int  # the first step of the run of steps on which the condition held
    detail: str


@dataclass
class HackingMonitor:
    config: MonitorConfig
    gold: CompositeReward | None = None
    history: list[dict] = field(default_factory=list)  # the steps' records, in order
    streaks: dict[str, int] = field(default_factory=dict)
    flags: dict[str, Flag] = field(default_factory=dict)
    # the gold reward's scores of the last step measured, per sample: a reward model that
    # learns during RL (training/rl/online_rm.py) may take its labels from a gold verifier
    gold_result: RewardResult | None = None

    def measure(self, texts: list[str], samples: list[dict]) -> dict:
        """The monitor's own measurements of one step's completions."""
        repeated = sum(repeated_ngram_fraction(t, self.config.repetition_ngram) for t in texts)
        stats = {REPETITION: repeated / max(len(texts), 1)}
        if self.gold is not None:
            result = self.gold_result = self.gold.score(texts, samples)
            stats[GOLD] = float(result.total.mean())
            stats.update({f"monitor/gold/{k}": float(v.mean()) for k, v in result.components.items()})
        return stats

    def _smoothed(self, key: str) -> float | None:
        values = [r[key] for r in self.history[-self.config.window:] if key in r]
        return sum(values) / len(values) if values else None

    def _baseline(self, key: str) -> float | None:
        values = [r[key] for r in self.history[: self.config.baseline_steps] if key in r]
        return sum(values) / len(values) if values else None

    def _format_score(self, record: dict) -> float | None:
        """The step's summed format components (a dict-valued reward counts with all its parts)."""
        names = self.config.format_components
        parts = [v for k, v in record.items() for n in names if k == f"reward/{n}" or k.startswith(f"reward/{n}/")]
        return sum(parts) if names and parts else None

    def update(self, record: dict, announce: bool = True) -> dict:
        """Add one step's record (with measure()'s stats in it); returns the monitor/* metrics.
        A newly raised flag is logged as a warning when announce is set."""
        out = {}
        fmt = self._format_score(record)
        if fmt is not None:
            out[FORMAT] = fmt
        self.history.append({**record, **out})
        c = self.config
        if len(self.history) < c.baseline_steps:
            return out
        now = {key: self._smoothed(key) for key in (TRAIN, GOLD, REPETITION, FORMAT)}
        start = {key: self._baseline(key) for key in now}
        gain = {key: now[key] - start[key] for key in now if now[key] is not None and start[key] is not None}
        conditions = {}
        if GOLD in gain:
            out["monitor/gap"] = gain[TRAIN] - gain[GOLD]
            moves = f"trained reward {gain[TRAIN]:+.3f}, gold {gain[GOLD]:+.3f} since the start"
            conditions["gap"] = (out["monitor/gap"] > c.gap_threshold, moves)
            if start[GOLD] > 0:
                conditions["gold_drop"] = (gain[TRAIN] > 0 and now[GOLD] < (1 - c.gold_drop) * start[GOLD],
                                           f"{moves}: gold {start[GOLD]:.3f} -> {now[GOLD]:.3f}")
        if REPETITION in gain:  # absent only when replaying a run logged before the monitor existed
            conditions["repetition"] = (gain[REPETITION] > c.repetition_rise,
                                        f"repeated {c.repetition_ngram}-gram fraction {gain[REPETITION]:+.3f} since "
                                        "the start")
        length, length0 = self._smoothed(LENGTH), self._baseline(LENGTH)
        if length0:
            conditions["length"] = (length > c.length_factor * length0, f"mean length {length0:.1f} -> {length:.1f} "
                    "tokens")
        if FORMAT in gain and GOLD in gain:
            conditions["format_only"] = (gain[FORMAT] > c.format_gain and gain[GOLD] < c.gold_gain_min,
                                         f"format {gain[FORMAT]:+.3f}, gold {gain[GOLD]:+.3f} since the start")
        step = record["step"]
        for kind, (holds, detail) in conditions.items():
            self.streaks[kind] = self.streaks.get(kind, 0) + 1 if holds else 0
            out[f"monitor/flag_{kind}"] = int(holds)
            if self.streaks[kind] == c.patience and kind not in self.flags:
                self.flags[kind] = Flag(step - c.patience + 1, detail)
                if announce:
                    log.warning("hacking monitor: %s from step %d (%s)", kind, step - c.patience + 1, detail)
        return out

    def summary(self) -> dict:
        return {"baseline": {k: self._baseline(k) for k in (TRAIN, GOLD, REPETITION,
                                                            LENGTH) if self._baseline(k) is not None},
                "flags": {kind: {"step": f.step, "detail": f.detail} for kind, f in self.flags.items()}}

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.summary(), indent=1))
        tmp.replace(path)


def replay_monitor(config: MonitorConfig, records: list[dict]) -> HackingMonitor:
    """A monitor fed a run's logged steps: on resume, or to try other thresholds on a
    finished run (`aha monitor RUN monitor.gap_threshold=0.05`) without training again."""
    monitor = HackingMonitor(config)
    for record in records:
        if "reward/mean" in record:  # a training step (eval records have none)
            monitor.update(record, announce=False)
    return monitor


def format_flags(monitor: HackingMonitor) -> str:
    if not monitor.flags:
        return "hacking monitor: no flags"
    return "\n".join(f"hacking monitor: {kind} from step {flag.step} ({flag.detail})" for kind,
                     flag in monitor.flags.items())


def check_format_components(config: MonitorConfig, reward: CompositeReward) -> None:
    names = [c.name for c in reward.components]
    for i, name in enumerate(config.format_components):
        if name not in names:
            raise ValueError(f"monitor.format_components[{i}]: {name!r} is not the name of a reward (have: {names})")
