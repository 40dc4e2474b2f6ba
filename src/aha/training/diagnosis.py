"""The training diagnosis: during RL, flag the usual ways a run goes wrong, each with the step
its condition began, what it means and what users usually change.

Each detector is a pure function of the run's step records (metrics.jsonl, in order) and the
thresholds (config `diagnosis`), returning an Onset (the step the condition began, and the
numbers) or None. A series is smoothed (the median of `window` trailing steps, which a trend
passes and one outlying step does not) and compared with its start (the median of its first
baseline_steps values); its condition must hold `patience` steps in a row, and the flag's step
is the first of them. Every detector reads only the steps up to
the one it judges, so a flag raised during training is the one a replay of the finished run's
metrics.jsonl finds (on resume, by `aha monitor RUN`, with other thresholds).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aha.config import DiagnosisConfig

log = logging.getLogger(__name__)

ENTROPY, REWARD, ZERO_VARIANCE = "entropy", "reward/mean", "groups/zero_variance_frac"
KL_REF, KL_OLD, CLIP, GRAD_NORM = "kl/ref", "kl/old", "policy/clip_frac", "grad_norm"
GAP = "logprobs/engine_trainer_abs_diff"  # logged by training/rl (step.py, update.py)
FILE = "diagnosis.json"


@dataclass(frozen=True)
class Onset:
    step: int  # the first step of the run of steps on which the condition held
    detail: str  # the numbers that raised it


Points = list[tuple[int, float]]  # (step, value) of one series, finite values only


def step_records(records: list[dict]) -> list[dict]:
    """The training steps of a run's records (held-out evaluations have no reward/mean)."""
    return [r for r in records if REWARD in r]


def points(records: list[dict], key: str) -> Points:
    out = []
    for r in records:
        value = r.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            out.append((r["step"], float(value)))
    return out


def smoothed(series: Points, window: int) -> Points:
    """Each value replaced by the median of it and the window - 1 values before it: a trend
    passes, one outlying step (a reward in another scale, a gradient spike) does not."""
    values = [v for _, v in series]
    return [(s, statistics.median(values[max(0, i - window + 1): i + 1])) for i, (s, _) in enumerate(series)]


def start_of(series: Points, c: DiagnosisConfig) -> float | None:
    """The median of a series' first baseline_steps values (None before it has that many)."""
    if len(series) < c.baseline_steps:
        return None
    return statistics.median(v for _, v in series[: c.baseline_steps])


def first_held(judged: list[tuple[int, bool]], patience: int) -> int | None:
    """The step starting the first run of `patience` consecutive steps whose condition held."""
    streak = 0
    for i, (_, holds) in enumerate(judged):
        streak = streak + 1 if holds else 0
        if streak == patience:
            return judged[i - patience + 1][0]
    return None


def _held(series: Points, c: DiagnosisConfig, condition: Callable[[float], bool], describe) -> Onset | None:
    """The onset of `condition` on the smoothed series, judged from its baseline_steps-th step."""
    smooth = smoothed(series, c.window)[c.baseline_steps - 1:]
    step = first_held([(s, condition(v)) for s, v in smooth], c.patience)
    return None if step is None else Onset(step, describe(dict(smooth)[step]))


def entropy_collapse(records: list[dict], c: DiagnosisConfig) -> Onset | None:
    """The entropy fell by entropy_drop of its start and below entropy_min nats per token."""
    series = points(records, ENTROPY)
    start = start_of(series, c)
    if start is None:
        return None
    return _held(series, c, lambda v: v < (1 - c.entropy_drop) * start and v < c.entropy_min,
                 lambda v: f"entropy {start:.3g} -> {v:.3g} nats per token")


def reward_collapse(records: list[dict], c: DiagnosisConfig) -> Onset | None:
    """The mean reward rose reward_rise above its start, then gave back reward_fall of its best gain."""
    series = points(records, REWARD)
    start = start_of(series, c)
    if start is None:
        return None
    smooth = smoothed(series, c.window)[c.baseline_steps - 1:]
    judged, best, best_at, at_onset = [], -math.inf, None, {}
    for s, v in smooth:
        if v > best:
            best, best_at = v, s
        gain = best - start
        judged.append((s, gain >= c.reward_rise and v <= best - c.reward_fall * gain))
        at_onset[s] = (best, best_at, v)
    step = first_held(judged, c.patience)
    if step is None:
        return None
    best, best_at, now = at_onset[step]
    return Onset(step, f"mean reward {start:.3g} at the start, {best:.3g} at step {best_at}, {now:.3g} at step {step}")


def informative_groups_gone(records: list[dict], c: DiagnosisConfig) -> Onset | None:
    """The share of groups whose rewards differ fell to informative_min from above it."""
    series = [(s, 1.0 - v) for s, v in points(records, ZERO_VARIANCE)]
    start = start_of(series, c)
    if start is None or start <= c.informative_min:  # never informative: the alarms' "nothing to train on"
        return None
    return _held(series, c, lambda v: v <= c.informative_min,
                 lambda v: f"groups with differing rewards {start:.0%} -> {v:.0%} of those sampled")


def kl_blowup(records: list[dict], c: DiagnosisConfig) -> Onset | None:
    """kl/ref above kl_ref_max or kl/old above kl_old_max, whichever came first."""
    found = []
    for key, limit in ((KL_REF, c.kl_ref_max), (KL_OLD, c.kl_old_max)):
        series = points(records, key)
        if len(series) >= c.baseline_steps:
            onset = _held(series, c, lambda v, limit=limit: v > limit,
                          lambda v, key=key, limit=limit: f"{key} {v:.3g} nats per token (> {limit:g})")
            found += [onset] if onset is not None else []
    return min(found, key=lambda o: o.step, default=None)


def clip_blowup(records: list[dict], c: DiagnosisConfig) -> Onset | None:
    series = points(records, CLIP)
    if len(series) < c.baseline_steps:
        return None
    return _held(series, c, lambda v: v > c.clip_frac_max,
                 lambda v: f"clip fraction {v:.0%} of tokens (> {c.clip_frac_max:.0%})")


def grad_norm_spike(records: list[dict], c: DiagnosisConfig) -> Onset | None:
    """A step's grad_norm above grad_spike_factor times the median of the `window` before it (of
    steps that trained: one whose every advantage was zero has no policy gradient to compare)."""
    series = points([r for r in records if not r.get("train/nothing_to_train")], GRAD_NORM)
    for i in range(max(c.window, c.baseline_steps), len(series)):
        median = statistics.median(v for _, v in series[i - c.window: i])
        step, norm = series[i]
        if median > 0 and norm > c.grad_spike_factor * median:
            return Onset(step, f"grad_norm {norm:.3g}, {norm / median:.0f}x the median {median:.3g} of "
                               f"the {c.window} steps before")
    return None


def logprob_gap(records: list[dict], c: DiagnosisConfig) -> Onset | None:
    """The engine/trainer log-prob gap grew to gap_factor times its start and above gap_min. Its
    start is the least of its first baseline_steps values: the weights both hold agree at the
    first step, and an engine left on stale weights has drifted from the second on."""
    series = points(records, GAP)
    if len(series) < c.baseline_steps:
        return None
    start = min(v for _, v in series[: c.baseline_steps])
    return _held(series, c, lambda v: v > c.gap_factor * start and v > c.gap_min,
                 lambda v: f"mean |log pi_trainer - log pi_engine| {start:.3g} -> {v:.3g} nats per token")


@dataclass(frozen=True)
class Kind:
    detect: Callable[[list[dict], DiagnosisConfig], Onset | None]
    meaning: str
    advice: str


KINDS = {
    "entropy_collapse": Kind(entropy_collapse, "the policy has become nearly deterministic on its own samples: it "
                             "stops exploring, its groups turn all-right or all-wrong and learning stalls",
                             "lower train.lr; raise algorithm.clip_high (DAPO's clip-higher); add "
                             "algorithm.entropy_coef; raise rollout.temperature"),
    "reward_collapse": Kind(reward_collapse, "the mean reward rose and then fell back: the policy degenerated (often "
                            "after an entropy collapse or a KL blow-up), or what it learned to exploit stopped paying",
                            "lower train.lr or train.max_grad_norm; add or raise algorithm.kl_coef; restart from a "
                            "checkpoint before the fall; read samples.jsonl around the step"),
    "informative_groups_gone": Kind(informative_groups_gone, "almost every group's completions now score alike (all "
                                    "right or all wrong): their advantages are zero, so the steps train on nothing",
                                    "prompts of the right difficulty (curriculum.filter, curriculum.weighting, "
                                    "curriculum.difficulty_max); algorithm.dynamic_sampling; a larger "
                                    "rollout.group_size; a reward with partial credit"),
    "kl_blowup": Kind(kl_blowup, "the policy moved far from the reference (kl/ref), or each update moved far off the "
                      "policy that sampled (kl/old): the steps are too large and training may turn unstable",
                      "lower train.lr; raise algorithm.kl_coef; fewer algorithm.epochs or algorithm.mini_batches; "
                      "algorithm.ref_reset_kl (ProRL's reference resets)"),
    "clip_blowup": Kind(clip_blowup, "a large share of tokens hit the ratio clip: the update wants to move the policy "
                        "further than the trust region allows, and their gradient is thrown away",
                        "lower train.lr; fewer algorithm.epochs or algorithm.mini_batches; check the engine/trainer "
                        "gap (logprobs/engine_trainer_abs_diff)"),
    "grad_norm_spike": Kind(grad_norm_spike, "one step's gradient was an order of magnitude above the steps before: a "
                            "rare batch, a loss term out of scale, or the start of divergence",
                            "lower train.max_grad_norm (it clips every step) or train.lr; read samples.jsonl at the "
                            "step (very long or degenerate completions)"),
    "logprob_gap": Kind(logprob_gap, "the engine's sampling log-probs and the trainer's of the same tokens are "
                        "drifting apart: the update is more off-policy than it knows (precision, kernels, sampling "
                        "settings, stale weights in the engine)",
                        "algorithm.old_logprobs=trainer with algorithm.tis_cap (or is_mode=mask); the same dtype for "
                        "engine and trainer (train.dtype); with asynchronous RL a lower rollout.max_staleness"),
}


@dataclass(frozen=True)
class Flag:
    name: str
    step: int
    detail: str

    @property
    def line(self) -> str:
        kind = KINDS[self.name]
        return f"diagnosis: {self.name} from step {self.step} ({self.detail}): {kind.meaning}. Usually: {kind.advice}"

    def as_dict(self) -> dict:
        kind = KINDS[self.name]
        return {"step": self.step, "detail": self.detail, "meaning": kind.meaning, "advice": kind.advice}


def diagnose(records: list[dict], config: DiagnosisConfig, skip: set[str] = frozenset()) -> dict[str, Flag]:
    """Every flag the run's records raise, by name (those in skip are not looked for)."""
    steps = step_records(records)
    found = {name: kind.detect(steps, config) for name, kind in KINDS.items() if name not in skip}
    return {name: Flag(name, onset.step, onset.detail) for name, onset in found.items() if onset is not None}


@dataclass
class Diagnosis:
    """The flags of a run as it trains: each is said once, when it is raised."""

    config: DiagnosisConfig
    records: list[dict] = field(default_factory=list)
    flags: dict[str, Flag] = field(default_factory=dict)

    @classmethod
    def replay(cls, config: DiagnosisConfig, records: list[dict]) -> Diagnosis:
        """Rebuilt from a run's logged records (on resume; `aha monitor RUN`): nothing is said."""
        steps = step_records(records)
        return cls(config, steps, diagnose(steps, config) if config.enabled else {})

    def observe(self, record: dict, echo) -> list[Flag]:
        """Add one step's record; the flags it raises are echoed and logged (log.txt)."""
        if not self.config.enabled or REWARD not in record:
            return []
        self.records.append(record)
        # a raised flag stays as it is (each detector reads only the steps up to its onset)
        new = diagnose(self.records, self.config, skip=set(self.flags))
        for flag in sorted(new.values(), key=lambda f: f.step):
            self.flags[flag.name] = flag
            echo("warning: " + flag.line)
            log.warning(flag.line)
        return list(new.values())

    def summary(self) -> dict:
        ordered = sorted(self.flags.values(), key=lambda f: f.step)
        return {"flags": {flag.name: flag.as_dict() for flag in ordered}}

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.summary(), indent=1))
        tmp.replace(path)


def format_diagnosis(diagnosis: Diagnosis) -> str:
    if not diagnosis.flags:
        return "diagnosis: no flags"
    return "\n".join(flag.line for flag in sorted(diagnosis.flags.values(), key=lambda f: f.step))
