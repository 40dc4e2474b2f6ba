"""Compare RL algorithms on the demo task at equal rollout budget; write a markdown table.

    python bench/compare_algorithms.py [--recipes grpo dr_grpo rloo ppo_gae] [--out runs/compare]

Each recipe in configs/ uses the demo's task and budget (8 prompts x 8 samples x 30 steps,
no dynamic sampling, so every run samples exactly the same number of completions). Runs go
one after another: on a 2-core machine, two at once slow each other down several-fold.
The table is printed and written to OUT/table.md; existing finished runs are reused.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def summarise(name: str, run: Path) -> dict:
    rows = records(run)
    steps = [r for r in rows if "reward/mean" in r]  # training steps (eval records have eval/accuracy)
    group_size = yaml.safe_load((run / "config.yaml").read_text())["rollout"]["group_size"]
    evals = {r["step"]: r["eval/accuracy"] for r in rows if "eval/accuracy" in r}
    last = max(evals)
    return {
        "recipe": name,
        "accuracy_after": evals[last],
        "accuracy_before": evals.get(0),
        "rollouts": sum(r["groups/sampled"] for r in steps) * group_size,
        "mean_length_last5": sum(r["length/mean"] for r in steps[-5:]) / len(steps[-5:]),
        "train_minutes": sum(r["time/step_s"] for r in steps) / 60,
        "s_per_step": sum(r["time/step_s"] for r in steps) / len(steps),
        "reward_last5": sum(r["reward/mean"] for r in steps[-5:]) / len(steps[-5:]),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipes", nargs="+", default=["grpo", "dr_grpo", "rloo", "ppo_gae"])
    parser.add_argument("--out", default="runs/compare")
    parser.add_argument("overrides", nargs="*", help="key=value overrides applied to every recipe")
    args = parser.parse_args(argv)
    out = Path(args.out)
    summaries = []
    for i, name in enumerate(args.recipes):
        run = out / name
        done = (run / "metrics.jsonl").exists() and any("eval/accuracy" in r and r["step"] > 0 for r in records(run))
        if not done:
            # the base model's accuracy is the same for every recipe: measure it once
            before = "eval.before=true" if i == 0 else "eval.before=false"
            cmd = [sys.executable, "-m", "aha.cli", "train", str(ROOT / "configs" / f"{name}.yaml"),
                   f"output_dir={run}", before, *args.overrides]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        summaries.append(summarise(name, run))
    base = next((s["accuracy_before"] for s in summaries if s["accuracy_before"] is not None), None)
    lines = ["| Recipe | Held-out greedy accuracy | Mean length (last 5 steps) | Train reward (last 5 steps) | "
             "Completions sampled | Training wall time | s/step |",
             "|---|---|---|---|---|---|---|"]
    for s in summaries:
        lines.append(f"| `{s['recipe']}` | {s['accuracy_after']:.1%} | {s['mean_length_last5']:.1f} tokens | "
                     f"{s['reward_last5']:.2f} | {s['rollouts']} | {s['train_minutes']:.1f} min | "
                     f"{s['s_per_step']:.1f} |")
    if base is not None:
        lines.append(f"\nBase model before training: {base:.1%}.")
    table = "\n".join(lines)
    (out / "table.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
