"""Does online difficulty filtering reach the uniform sampler's held-out accuracy with fewer
rollouts? The demo (configs/quickstart.yaml) trained on a pool where most problems are beyond
the model: some of the demo's own products (a in 2..60, b in 2..9) mixed with products of two
3-digit numbers, which SmolLM2-135M does not get right. Every group of such a problem is all
wrong: no advantage, rollouts spent for nothing. The uniform sampler keeps drawing them; the
filter sets a prompt aside after an all-wrong (or all-right) group.

    .venv/bin/python bench/curriculum.py        # 16 + 112 problems, 20 steps, seed 0: ~20 min
    .venv/bin/python bench/curriculum.py --learnable 8 --hard 24 --steps 12 --every 2
    .venv/bin/python bench/curriculum.py --learnable 16 --hard 48 --steps 10 --every 2 \
        --max-rounds 4 --retest-after 4

Held-out: the demo's own 200 held-out problems (none in training). Prints, per run, the groups
sampled so far and the held-out accuracy at each evaluation (docs/tasks.md has the results),
and for each setting the rollouts it needed to reach the uniform run's final held-out accuracy
(same seed). Difficulty targeting against the uniform sampler, three seeds each, on the two
pools where the one-look filter lost (4 settings x 3 seeds: 12 runs a pool):

    .venv/bin/python bench/curriculum.py --learnable 8 --hard 24 --steps 12 --every 2 --seeds 0 1 2 \
        --settings uniform filter second_look target --out runs/curriculum-8-24
    .venv/bin/python bench/curriculum.py --learnable 16 --hard 48 --steps 10 --every 2 --max-rounds 4 \
        --retest-after 4 --seeds 0 1 2 --settings uniform filter second_look target --out runs/curriculum-16-48
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from aha.config import TaskConfig  # noqa: E402
from aha.tasks.arithmetic import arithmetic_splits  # noqa: E402

TEMPLATE = "What is {a} {op} {b}?"
GROUP_SIZE = 8  # configs/quickstart.yaml's rollout.group_size: rollouts = groups sampled x 8


def write_pool(folder: Path, learnable: int, hard: int) -> tuple[Path, Path]:
    """The training pool (learnable demo problems + hard 3-digit products) and the demo's
    held-out problems, as task files."""
    train, held_out = arithmetic_splits(TaskConfig(name="arithmetic", operators=["*"], a_min=2, a_max=60,
                                                   b_min=2, b_max=9, num_eval=200, template=TEMPLATE))
    rng = random.Random("curriculum-pool")
    hard_rows, seen = [], set()
    while len(hard_rows) < hard:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        if (a, b) not in seen:
            seen.add((a, b))
            hard_rows.append({"id": f"hard-{a}*{b}", "prompt": TEMPLATE.format(a=a, op="*", b=b), "answer": str(a * b)})
    pool = [dict(row, band="demo") for row in train[:learnable]] + [dict(row, band="hard") for row in hard_rows]
    folder.mkdir(parents=True, exist_ok=True)
    train_file, eval_file = folder / "pool.jsonl", folder / "held_out.jsonl"
    train_file.write_text("".join(json.dumps(row) + "\n" for row in pool))
    eval_file.write_text("".join(json.dumps(row) + "\n" for row in held_out))
    return train_file, eval_file


def run(name: str, out: Path, train_file: Path, eval_file: Path, seed: int, steps: int, every: int,
        extra: list[str]) -> tuple[list[tuple[int, int, float]], int]:
    """One training run; returns (step, groups sampled so far, held-out accuracy) per evaluation
    and the groups trained over the run (those with an advantage)."""
    folder = out / f"{name}-seed{seed}"
    if not finished(folder, steps):  # a finished run (an earlier invocation's) is read, not run again
        train(folder, train_file, eval_file, seed, steps, every, extra)
    sampled, trained, points = 0, 0, []
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "groups/sampled" in record:
            sampled += record["groups/sampled"]
            trained += record["groups/trained"]
        if "eval/accuracy" in record:
            points.append((record.get("step", 0), sampled, record["eval/accuracy"]))
    return points, trained


def finished(folder: Path, steps: int) -> bool:
    """Whether the run's metrics hold its final held-out accuracy."""
    metrics = folder / "metrics.jsonl"
    return metrics.is_file() and any(json.loads(line).get("step") == steps and "eval/accuracy" in json.loads(line)
                                     for line in metrics.read_text().splitlines())


def train(folder: Path, train_file: Path, eval_file: Path, seed: int, steps: int, every: int,
          extra: list[str]) -> None:
    command = [str(ROOT / ".venv/bin/aha"), "train", str(ROOT / "configs/quickstart.yaml"), "task.name=null",
               f"task.data={train_file}", f"task.eval_data={eval_file}", f"seed={seed}", f"train.steps={steps}",
               f"eval.every={every}", "train.report=false", f"train.checkpoint_every={steps}", f"output_dir={folder}",
               *extra]
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)  # 3 GB a run; the comparison reads the metrics only


def rollouts_to_reach(points: list[tuple[int, int, float]], accuracy: float, group_size: int) -> int | None:
    """Rollouts sampled up to the first evaluation at or above `accuracy` (None: never)."""
    for _, sampled, reached in points:
        if reached >= accuracy:
            return sampled * group_size
    return None


def settings_of(args) -> dict[str, list[str]]:
    """Each run's overrides: the uniform sampler, the one-look filter, the filter after a second
    look, the target curriculum (prompts drawn toward a pass rate of --target-p), and ExPO's
    guidance for unsolved groups (algorithm.guidance=expo, with the uniform sampler)."""
    rounds = [f"algorithm.max_rounds={args.max_rounds}"]
    filter_ = ["curriculum.filter=true", f"curriculum.retest_after={args.retest_after}"]
    every = {"uniform": rounds, "filter": rounds + filter_,
             "second_look": rounds + filter_ + ["curriculum.filter_after=2"],
             "target": rounds + ["curriculum.weighting=target", f"curriculum.target_p={args.target_p}",
                                 f"curriculum.prior={args.prior}"],
             "expo": rounds + ["algorithm.guidance=expo"]}
    return {name: every[name] for name in args.settings}


def summary(results: dict, seeds: list[int], group_size: int) -> None:
    """Per setting and seed: rollouts to reach the uniform run's final accuracy, and the mean
    over seeds (over those that reached it, with the count)."""
    print("\n| run | seed | rollouts to reach uniform's final accuracy | final accuracy | groups trained |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        reached = []
        for seed in seeds:
            points, trained = runs[seed]
            goal = results["uniform"][seed][0][-1][2]
            needed = rollouts_to_reach(points, goal, group_size)
            reached += [needed] if needed is not None else []
            cell = f"{needed} (of {points[-1][1] * group_size})" if needed is not None else "not reached"
            print(f"| {name} | {seed} | {cell} | {100 * points[-1][2]:.1f}% | {trained} |")
        mean = f"{sum(reached) / len(reached):.0f}" if reached else "-"
        print(f"| {name} | mean | {mean} ({len(reached)} of {len(seeds)} seeds reached) | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--learnable", type=int, default=16, help="demo problems in the pool")
    parser.add_argument("--hard", type=int, default=112, help="3-digit products in the pool")
    parser.add_argument("--max-rounds", type=int, default=2, help="dynamic sampling's rounds a step (the demo's 2)")
    parser.add_argument("--retest-after", type=int, default=2, help="curriculum.retest_after of the filter run")
    parser.add_argument("--settings", nargs="+", default=["uniform", "filter"],
                        choices=["uniform", "filter", "second_look", "target", "expo"],
                        help="runs per seed (uniform first); a finished run's folder is read, not run again")
    parser.add_argument("--target-p", type=float, default=0.5, help="curriculum.target_p of the target run")
    parser.add_argument("--prior", default="flat", choices=["flat", "pool"], help="curriculum.prior of the target run")
    parser.add_argument("--out", type=Path, default=ROOT / "runs/curriculum")
    args = parser.parse_args()
    if args.settings[0] != "uniform":
        parser.error("--settings must start with uniform: the others are measured against it")
    train_file, eval_file = write_pool(args.out / "data", args.learnable, args.hard)
    settings = settings_of(args)
    results: dict[str, dict[int, list]] = {name: {} for name in settings}
    for seed in args.seeds:
        for name, extra in settings.items():
            results[name][seed] = run(name, args.out, train_file, eval_file, seed, args.steps, args.every, extra)
            print(name, seed, results[name][seed], flush=True)
    first = results["uniform"][args.seeds[0]][0]
    print("\n| run | seed | " + " | ".join(f"step {s}" for s, _, _ in first) + " | groups trained |")
    print("|---|---|" + "---|" * (len(first) + 1))
    for name in settings:
        for seed in args.seeds:
            points, trained = results[name][seed]
            cells = [f"{g} / {100 * a:.1f}%" for _, g, a in points]
            print(f"| {name} | {seed} | " + " | ".join(cells) + f" | {trained} |")
    summary(results, args.seeds, GROUP_SIZE)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
