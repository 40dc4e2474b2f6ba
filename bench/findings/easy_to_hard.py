"""Claim 12: RL on easy problems transfers to harder ones.

GRPO on letter_count at difficulty 1 (one word: how many times does a letter appear), 20 steps,
with held-out greedy accuracy at difficulty 2 during training; then the checkpoint's and the
base model's greedy accuracy on 200 held-out problems at difficulty 1, 2 and 3 (`aha eval
task.eval_difficulty=D`). Transfer means the trained model beats the base model at 2 and 3.

    .venv/bin/python bench/findings/easy_to_hard.py [--page-only]
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from statistics import mean

from pages import Found, main
from runner import Claim, Condition, noise, run_folder, run_once, spread

STEPS, LEVELS = 20, (1, 2, 3)
# 400 training problems: at difficulty 1 there are only ~660 with the letter in the word, so the
# default 2,000 are 75% "0" and RL learns to answer "0" to everything (the page's earlier run)
TASK = ("task.name=letter_count", "task.difficulty=1", "task.num_train=400")
GRPO = Condition("GRPO on difficulty 1", ())
CLAIM = Claim(
    slug="easy-to-hard", title="RL on easy problems lifts harder ones",
    source="Zhao et al. 2025, Echo Chamber (arXiv:2504.07912)",
    statement="RL post-training on simpler questions can lead to gains on harder ones: what is learned at a low "
              "difficulty carries over to a higher one.",
    config="configs/procedural.yaml", conditions=[GRPO], seeds=(0, 1),
    common=(*TASK, "task.eval_difficulty=2", f"train.steps={STEPS}", "train.checkpoint_every=10", "eval.every=10",
            "train.report=false", "train.keep_checkpoints=1"))


def eval_argv(root: Path, level: int, seed: int | None) -> list[str]:
    """Greedy accuracy at one difficulty: of the base model (seed None) or of a seed's checkpoint."""
    out = root / CLAIM.slug / (f"base-d{level}.jsonl" if seed is None else f"trained-d{level}-s{seed}.jsonl")
    model = [] if seed is None else ["--checkpoint", str(run_folder(CLAIM, GRPO, seed, root) / "checkpoints" /
                                                         f"step-{STEPS}")]
    return ["aha", "eval", CLAIM.config, *TASK, f"task.eval_difficulty={level}", *model, "--output", str(out)]


def evaluate(root: Path) -> None:
    (root / CLAIM.slug).mkdir(parents=True, exist_ok=True)
    for level in LEVELS:
        for seed in (None, *CLAIM.seeds):
            argv = eval_argv(root, level, seed)
            run_once(argv, Path(argv[-1]))


def scores(path: Path) -> list[float]:
    return [json.loads(line)["score"] for line in path.read_text().splitlines() if line.strip()]


def accuracy(path: Path) -> float:
    got = scores(path)
    return sum(got) / len(got)


def count(path: Path) -> int:
    return len(scores(path))


def modal_share(path: Path, answer: str = r"-?\d+") -> float:
    """The share of completions whose last answer (the last match of `answer`: a number) is the most
    common one: near 1 is one answer to everything (a shortcut learned from the training split's
    answers), not transfer."""
    answers = []
    for line in path.read_text().splitlines():
        found = re.findall(answer, json.loads(line)["completion"].lower()) if line.strip() else None
        if found is not None:
            answers.append(found[-1] if found else None)
    return max(answers.count(a) for a in set(answers)) / len(answers)


def analyse(root: Path) -> Found:
    base = {level: accuracy(Path(eval_argv(root, level, None)[-1])) for level in LEVELS}
    trained = {level: [accuracy(Path(eval_argv(root, level, s)[-1])) for s in CLAIM.seeds] for level in LEVELS}
    gains = {level: [t - base[level] for t in trained[level]] for level in LEVELS}
    n = {level: count(Path(eval_argv(root, level, None)[-1])) for level in LEVELS}
    constant = {level: [modal_share(Path(eval_argv(root, level, s)[-1])) for s in CLAIM.seeds] for level in LEVELS}
    # a gain counts when every seed's is beyond two standard errors of the base model's accuracy, from a model
    # that does not give one answer to 90% of the problems
    beyond = {level: min(gains[level]) > noise(base[level], n[level]) and max(constant[level]) < 0.9
              for level in LEVELS}
    harder = [level for level in LEVELS[1:] if beyond[level]]
    if len(harder) == len(LEVELS) - 1 and beyond[1]:
        verdict = "reproduced"
    elif harder:
        verdict = "mixed"
    else:
        verdict = "not reproduced"
    key = ", ".join(f"d{level} {base[level]:.1%} -> {mean(trained[level]):.1%}" for level in LEVELS)
    reason = ("Trained at difficulty 1 only, the checkpoints changed held-out greedy accuracy by "
              + "; ".join(f"{', '.join(f'{g:+.1%}' for g in gains[level])} at difficulty {level}" for level in LEVELS)
              + " (per seed, against the base model). Gains beyond two standard errors of the base accuracy in "
              "every seed, from a model not giving one answer to 90% of the problems, at "
              + (", ".join(f"difficulty {level}" for level in harder) or "no harder difficulty") + ".")
    shortcut = [level for level in LEVELS if max(constant[level]) >= 0.9]
    if shortcut:
        reason += (" At " + ", ".join(f"difficulty {level}" for level in shortcut) + " the trained models give one "
                   f"answer to at least {min(min(constant[level]) for level in shortcut):.0%} of the problems: "
                   "RL learned the training split's most common answer, so their accuracy is that answer's share "
                   "of the held-out set, not transfer.")
    tables = {f"held-out greedy accuracy at difficulty {level} (base model: {base[level]:.3f})":
              {GRPO.name: trained[level]} for level in LEVELS}
    tables["gain over the base model, difficulty 3"] = {GRPO.name: gains[3]}
    tables.update({f"share of the most common answer, difficulty {level}": {GRPO.name: constant[level]}
                   for level in LEVELS})
    commands = tuple(shlex.join(eval_argv(root, level, seed)) for level in LEVELS for seed in (None, *CLAIM.seeds))
    notes = (f"The base model's accuracy is one greedy pass (no seed to vary); the trained rows' spread "
             f"({', '.join(f'd{level} {spread(trained[level]):.1%}' for level in LEVELS)}) is the training seed's. "
             "The graph-task half of the claim (G1: transfer to unseen graph tasks) has its own page, "
             "[RL on one graph task, evaluated on graph tasks it never saw](graph-transfer.md).")
    panels = {"reward/correct_frac": "training (difficulty 1): correct fraction",
              "eval/accuracy": "held-out greedy accuracy, difficulty 2", "length/mean": "completion length (tokens)"}
    return Found(tables, verdict, reason, key, panels, notes, commands)


if __name__ == "__main__":
    main(CLAIM, analyse, evaluate)
