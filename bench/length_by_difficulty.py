"""Length on easy and hard prompts in finished RL runs (for LASER-D and per-prompt A-DLP).

    aha eval CONFIG --output base.jsonl                                  # the base model, greedy
    aha eval CONFIG --checkpoint RUN/checkpoints/step-N --output RUN.jsonl   # each run's last weights
    python bench/length_by_difficulty.py RUN ... --evals RUN.jsonl ... --base base.jsonl [--last 5]

Per run, in tokens of the run's tokenizer:
- held-out (every problem of the eval files): greedy accuracy and mean completion length of the
  run's final weights, split by the problems the base model solved ("easy") or missed ("hard");
- training, over the last `--last` steps: the mean length of the example completion each group
  leaves in samples.jsonl, split by its group's pass rate in groups.jsonl (easy >= 2/3, hard
  < 1/3: LASER-D's buckets), and the whole step's mean length and correct share from metrics.jsonl.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from transformers import AutoTokenizer


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def held_out(final: list[dict], base: list[dict], count) -> dict:
    easy = {s["id"] for s in base if s["score"] >= 1}
    lengths = {s["id"]: count(s["completion"]) for s in final}
    return {"eval_accuracy": mean([s["score"] >= 1 for s in final]), "eval_length": mean(list(lengths.values())),
            "eval_length_easy": mean([n for i, n in lengths.items() if i in easy]),
            "eval_length_hard": mean([n for i, n in lengths.items() if i not in easy]),
            "eval_easy": len(easy & set(lengths)), "eval_n": len(final)}


def training(run: Path, samples: list[dict], count, last: int) -> dict:
    steps = [r for r in rows(run / "metrics.jsonl") if "reward/mean" in r]
    final = {r["step"] for r in steps[-last:]}
    rate = {}
    for g in rows(run / "groups.jsonl"):  # a prompt's first group of the step: the one its example comes from
        rate.setdefault((g["step"], g["id"]), g["right"] / g["tried"])
    by_bucket = {"easy": [], "hard": []}
    for s in samples:
        if s["split"] != "train" or s["step"] not in final:
            continue
        a, _, b = s["prompt"].removeprefix("What is ").removesuffix("?").split()
        p = rate.get((s["step"], f"{a}*{b}"))
        if p is not None and (p >= 2 / 3 or p < 1 / 3):
            by_bucket["easy" if p >= 2 / 3 else "hard"].append(count(s["completion"]))
    return {"train_length": mean([r["length/mean"] for r in steps[-last:]]),
            "train_correct": mean([r["reward/correct_frac"] for r in steps[-last:]]),
            **{f"train_length_{k}": mean(v) for k, v in by_bucket.items()},
            **{f"train_examples_{k}": len(v) for k, v in by_bucket.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--evals", nargs="+", type=Path, required=True, help="each run's `aha eval --output` file")
    parser.add_argument("--base", type=Path, required=True, help="the base model's `aha eval --output` file")
    parser.add_argument("--last", type=int, default=5)
    parser.add_argument("--tokenizer", type=Path, help="a model folder to count tokens with where a run's checkpoints "
                                                       "were deleted (any checkpoint of the same model)")
    args = parser.parse_args()
    base = rows(args.base)
    for run, final in zip(args.runs, args.evals, strict=True):
        checkpoints = list((run / "checkpoints").glob("step-*"))
        if not checkpoints and args.tokenizer is None:
            parser.error(f"{run} has no checkpoints to read its tokenizer from: pass --tokenizer MODEL_FOLDER")
        checkpoint = max(checkpoints, key=lambda p: int(p.name.split("-")[1])) if checkpoints else args.tokenizer
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)  # a checkpoint holds the run's tokenizer
        count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        samples = rows(run / "samples.jsonl")
        summary = {**held_out(rows(final), base, count), **training(run, samples, count, args.last)}
        print(run.name, json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in summary.items()}))


if __name__ == "__main__":
    main()
