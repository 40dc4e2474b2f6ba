"""The findings' common runner: one claim from the literature, tested with aha's own command.

A claim names its conditions (each a list of dotted overrides over one config) and its seeds.
run_claim trains every (condition, seed) with `aha train` into runs/findings/<slug>/<condition>-s<seed>,
skipping a run that already finished and resuming one that stopped (train.resume=true), so a
script can be stopped and started again. measure reads each run's metrics.jsonl back (last: a
metric's final value, tail_mean: a training metric's mean over the last steps), one number per
seed for each condition, and curves reads a metric step by step for the plot. pages.py renders
docs/findings/<slug>.md from them: the command, the tables (each seed, the mean and the spread),
the plot, the verdict and its reason; the page's first lines hold the verdict and key number in a
comment that tests/test_findings.py checks against the index (docs/findings/README.md).

Nothing here decides a verdict: each claim's script does, from the numbers, and says why."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from aha.jsonl import read_jsonl

VERDICTS = ("reproduced", "not reproduced", "mixed", "not testable here")
ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass(frozen=True)
class Condition:
    name: str
    overrides: tuple[str, ...] = ()
    runs: str | None = None  # the folder (under the root) of its runs when not the claim's: claims that share it
    config: str | None = None  # its own YAML config, when not the claim's (another method: sft, rft)
    # aha commands run before its training, each unless the file it writes (its last argument) exists:
    # what the run reads and no run makes (the prompts `aha select` picks from an earlier run)
    prepare: tuple[tuple[str, ...], ...] = ()


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


def run_folder(claim: Claim, condition: Condition, seed: int, root: Path) -> Path:
    """Where one run goes; a condition two claims share (the same runs folder, name and settings)
    is trained once, for the first."""
    return root / (condition.runs or claim.slug) / f"{slug(condition.name)}-s{seed}"


def slug(name: str) -> str:
    """A condition's name as a folder name: 'GRPO + ReDit (std 0.05)' -> 'grpo-redit-std-0.05'."""
    return "-".join(re.findall(r"[a-z0-9.]+", name.lower()))


def config_of(claim: Claim, condition: Condition) -> str:
    return condition.config or claim.config


def overrides(claim: Claim, condition: Condition, seed: int, root: Path) -> list[str]:
    """The claim's and the condition's overrides and the seed; "{seed}" and "{root}" in a condition's
    override name the run's seed and the runs' root, so that a run can start from the checkpoint of
    an earlier condition's run of the same seed (model={root}/<slug>/<its folder>-s{seed}/checkpoints/...)."""
    return [*claim.common, *(fill(o, seed, root) for o in condition.overrides), f"seed={seed}"]


def fill(text: str, seed: int, root: Path) -> str:
    """text with "{seed}" and "{root}" replaced (str.replace, not str.format: overrides hold YAML
    braces, "reward=[{fn: ...}]")."""
    return text.replace("{seed}", str(seed)).replace("{root}", str(root))


def prepare_commands(condition: Condition, seed: int, root: Path) -> list[list[str]]:
    """The commands run before one of the condition's runs, placeholders filled."""
    return [[fill(word, seed, root) for word in argv] for argv in condition.prepare]


def command(claim: Claim, condition: Condition, seed: int, root: Path) -> list[str]:
    """The `aha train` command of one run (what the page shows)."""
    return ["aha", "train", config_of(claim, condition), *overrides(claim, condition, seed, root),
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
    """metrics.jsonl as the run itself reads it (a torn last line left out)."""
    return [row for _, row in read_jsonl(folder / "metrics.jsonl", torn_tail=True)]


# settings that change no number a claim reads: a run made with other values of these is kept
IGNORED = {("output_dir",), ("train", "resume"), ("train", "report"), ("train", "keep_checkpoints")}


def differences(saved: dict, wanted: dict, path: tuple = ()) -> list[str]:
    """The dotted keys where a run's config.yaml differs from the config its command makes."""
    if isinstance(saved, dict) and isinstance(wanted, dict):
        return [d for key in sorted(set(saved) | set(wanted)) if path + (key,) not in IGNORED
                for d in differences(saved.get(key), wanted.get(key), path + (key,))]
    return [] if saved == wanted else [".".join(path)]


def check_kept(claim: Claim, condition: Condition, seed: int, folder: Path, root: Path) -> None:
    """A finished run is kept only if it is the run the command describes (a condition two claims
    share, or a script whose settings changed since, would otherwise be read as this one)."""
    import yaml

    from aha.config import dump_config, load_config

    wanted = yaml.safe_load(dump_config(load_config(config_of(claim, condition),
                                                    overrides(claim, condition, seed, root))))
    changed = differences(yaml.safe_load((folder / "config.yaml").read_text()), wanted)
    if changed:
        raise RuntimeError(f"{folder} was trained with other settings than its command's ({', '.join(changed)}); "
                           "move it away to train it again")


def run_claim(claim: Claim, root: Path, echo=print) -> None:
    """Train every (condition, seed) not finished yet, one after the other (2 cores: one at a time)."""
    for condition in claim.conditions:
        for seed in claim.seeds:
            folder = run_folder(claim, condition, seed, root)
            if finished(folder):
                check_kept(claim, condition, seed, folder, root)
                echo(f"{folder}: finished, kept")
                continue
            for argv in prepare_commands(condition, seed, root):
                Path(argv[-1]).parent.mkdir(parents=True, exist_ok=True)
                run_once(argv, Path(argv[-1]), echo)
            run_aha(command(claim, condition, seed, root), echo)


def run_once(argv: list[str], done: Path, echo=print) -> None:
    """Another aha command of a claim (an evaluation), run unless `done` (what it writes last)
    exists; its own caches make a stopped one resume where it was."""
    if done.is_file():
        echo(f"{done}: written, kept")
        return
    run_aha(argv, echo)


def eval_command(claim: Claim, root: Path, steps: int, label: str, condition: Condition | None = None,
                 seed: int | None = None, extra: tuple[str, ...] = ()) -> list[str]:
    """`aha eval` of the base model (condition None) or of a run's checkpoint at `steps`, writing
    each held-out completion to root/<slug>/<base or the run's folder name>-<label>.jsonl."""
    name, model = "base", []
    if condition is not None:
        folder = run_folder(claim, condition, seed, root)
        name, model = folder.name, ["--checkpoint", str(folder / "checkpoints" / f"step-{steps}")]
    return ["aha", "eval", claim.config, *extra, *model, "--output", str(root / claim.slug / f"{name}-{label}.jsonl")]


def eval_commands(claim: Claim, root: Path, steps: int, label: str, extra: tuple[str, ...] = ()) -> list[list[str]]:
    """The base model's evaluation, then every run's, in condition and seed order."""
    return [eval_command(claim, root, steps, label, extra=extra)] + [
        eval_command(claim, root, steps, label, c, s, extra) for c in claim.conditions for s in claim.seeds]


def run_evals(commands: list[list[str]], echo=print) -> None:
    """Each evaluation not written yet (its --output, the command's last argument)."""
    for argv in commands:
        Path(argv[-1]).parent.mkdir(parents=True, exist_ok=True)
        run_once(argv, Path(argv[-1]), echo)


def output_rows(argv: list[str]) -> list[dict]:
    """The rows an aha command wrote to its --output (its last argument): an evaluation's held-out
    completions, an audit's errors."""
    return [row for _, row in read_jsonl(Path(argv[-1]))]


def run_aha(argv: list[str], echo=print) -> None:
    """One `aha ...` command in this Python's environment, from the repository; a failure names it."""
    echo("$ " + shlex.join(argv))
    status = subprocess.call([sys.executable, "-m", "aha.cli", *argv[1:]], cwd=ROOT)
    if status:
        raise RuntimeError(f"{shlex.join(argv)} stopped with exit status {status}; run the script again to resume it")


def last(metric: str):
    """A run's metric at its last record that holds it (a held-out one: after training)."""
    def read(records: list[dict]) -> float:
        held = [r[metric] for r in records if r.get(metric) is not None]
        if not held:
            raise ValueError(f"no {metric} logged")
        return float(held[-1])
    return read


def at(metric: str, step: int):
    """The metric at a step's held-out evaluation (step 0: before training)."""
    def read(records: list[dict]) -> float:
        held = [r[metric] for r in records if r.get("step") == step and "time/step_s" not in r and metric in r]
        if not held:
            raise ValueError(f"no {metric} at step {step}")
        return float(held[0])
    return read


def first(metric: str):
    """The metric at the first training step."""
    def read(records: list[dict]) -> float:
        held = [r[metric] for r in records if "time/step_s" in r and metric in r]
        if not held:
            raise ValueError(f"no {metric} at a training step")
        return float(held[0])
    return read


def tail_mean(metric: str, steps: int):
    """A training metric's mean over a run's last `steps` training steps (one step is noisy)."""
    def read(records: list[dict]) -> float:
        held = [r[metric] for r in records if r.get(metric) is not None and "time/step_s" in r][-steps:]
        if not held:
            raise ValueError(f"no {metric} logged at a training step")
        return mean(float(v) for v in held)
    return read


def total(metric: str):
    """A training metric summed over a run's steps (groups/sampled: every group the run drew)."""
    def read(records: list[dict]) -> float:
        return float(sum(r[metric] for r in records if "time/step_s" in r))
    return read


def measure(claim: Claim, root: Path, read) -> dict[str, list[float]]:
    """read(records) of each run: condition -> one number per seed, in seed order."""
    values = {}
    for condition in claim.conditions:
        values[condition.name] = []
        for seed in claim.seeds:
            folder = run_folder(claim, condition, seed, root)
            try:
                values[condition.name].append(read(read_metrics(folder)))
            except ValueError as err:
                raise ValueError(f"{folder}: {err}") from None
    return values


def curves(claim: Claim, root: Path, metric: str) -> dict[str, list[dict[int, float]]]:
    """condition -> for each seed, step -> the metric at that step (training steps and evaluations)."""
    return {c.name: [{r["step"]: float(r[metric]) for r in read_metrics(run_folder(claim, c, seed, root))
                      if r.get(metric) is not None} for seed in claim.seeds] for c in claim.conditions}


def noise(p: float, n: int) -> float:
    """Two standard errors of an accuracy p measured on n problems: a gain smaller than this is
    within what drawing the problems alone could give."""
    return 2 * (max(p * (1 - p), 0.0) / n) ** 0.5


def spread(values: list[float]) -> float:
    """The seeds' spread: the largest value less the smallest."""
    return max(values) - min(values)
