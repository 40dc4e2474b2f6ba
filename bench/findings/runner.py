"""The findings' common runner: one claim from the literature, tested with aha's own command.

A claim names its conditions (each a list of dotted overrides over one config) and its seeds.
run_claim trains every (condition, seed) with `aha train` into runs/findings/<slug>/<condition>-s<seed>,
skipping a run that already finished and resuming one that stopped (train.resume=true), so a
script can be stopped and started again. summarize reads each run's metrics.jsonl back: the
claim's metric at the last held-out evaluation, per seed, with the mean and the spread (max -
min) of each condition. write_page renders docs/findings/<slug>.md: the command, the table,
the plot, the verdict and its reason; the page's first lines hold the verdict and key number
in a comment that tests/test_findings.py checks against the index (docs/findings/README.md).

Nothing here decides a verdict: each claim's script does, from the numbers, and says why."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean

VERDICTS = ("reproduced", "not reproduced", "mixed", "not testable here")
ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Condition:
    name: str
    overrides: tuple[str, ...] = ()


@dataclass
class Claim:
    slug: str  # the page's file name and the runs' folder
    title: str
    source: str  # the paper, as the paper index names it
    statement: str  # what the paper claims
    config: str  # the YAML config every run starts from (relative to the repository)
    conditions: list[Condition]
    seeds: tuple[int, ...] = (0, 1)
    common: tuple[str, ...] = ()  # overrides of every run
    metric: str = "eval/accuracy"  # read at the last record that holds it


@dataclass
class Summary:
    values: dict[str, list[float]]  # condition -> the metric of each seed, in seed order
    curves: dict[str, dict[int, float]] = field(default_factory=dict)  # condition -> step -> mean over seeds

    def mean(self, condition: str) -> float:
        return mean(self.values[condition])

    def spread(self, condition: str) -> float:
        return max(self.values[condition]) - min(self.values[condition])


def run_folder(claim: Claim, condition: Condition, seed: int, root: Path) -> Path:
    return root / claim.slug / f"{condition.name}-s{seed}"


def command(claim: Claim, condition: Condition, seed: int, root: Path) -> list[str]:
    """The `aha train` command of one run (what the page shows)."""
    return ["aha", "train", claim.config, *claim.common, *condition.overrides, f"seed={seed}",
            f"output_dir={run_folder(claim, condition, seed, root)}", "train.resume=true"]


def finished(folder: Path) -> bool:
    """A run whose last held-out evaluation after training is written (its summary line)."""
    config = folder / "config.yaml"
    if not config.is_file() or not (folder / "metrics.jsonl").is_file():
        return False
    import yaml

    steps = (yaml.safe_load(config.read_text()).get("train") or {}).get("steps")
    return any(r.get("step") == steps and "time/step_s" not in r for r in read_metrics(folder))


def read_metrics(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines() if line.strip()]


def run_claim(claim: Claim, root: Path, echo=print) -> None:
    """Train every (condition, seed) not finished yet, one after the other (2 cores: one at a time)."""
    for condition in claim.conditions:
        for seed in claim.seeds:
            folder = run_folder(claim, condition, seed, root)
            if finished(folder):
                echo(f"{folder}: finished, kept")
                continue
            argv = command(claim, condition, seed, root)
            echo("$ " + shlex.join(argv))
            status = subprocess.call([sys.executable, "-m", "aha.cli", *argv[1:]], cwd=ROOT)
            if status:
                raise RuntimeError(f"{shlex.join(argv)} stopped with exit status {status}; run the script again to "
                                   "resume it")


def summarize(claim: Claim, root: Path, curve_metric: str = "reward/mean") -> Summary:
    """Each condition's metric at its last record that holds it, per seed, and its mean curve."""
    values, curves = {}, {}
    for condition in claim.conditions:
        values[condition.name], by_step = [], {}
        for seed in claim.seeds:
            records = read_metrics(run_folder(claim, condition, seed, root))
            held = [r[claim.metric] for r in records if claim.metric in r]
            if not held:
                raise ValueError(f"{run_folder(claim, condition, seed, root)} logged no {claim.metric}")
            values[condition.name].append(float(held[-1]))
            for r in records:
                if curve_metric in r:
                    by_step.setdefault(r["step"], []).append(float(r[curve_metric]))
        curves[condition.name] = {step: mean(v) for step, v in sorted(by_step.items())}
    return Summary(values, curves)
