"""Proof that a refactor kept behaviour: fixed-seed tiny runs of every method, fingerprinted.

    .venv/bin/python bench/same_behaviour.py --out before.json              # this tree's src/
    .venv/bin/python bench/same_behaviour.py --src /tmp/base/src --out before.json
    .venv/bin/python bench/same_behaviour.py --out after.json --compare before.json

Each case is one `aha train` (on the tiny model, in a fresh process, with PYTHONPATH=<src>) of a
method or an RL variant; its fingerprint is metrics.jsonl with the timings (`time/*`) left out,
samples.jsonl, and the SHA-256 of every tensor of the final checkpoint. Two trees behave the
same when every case's fingerprint is equal; --compare names the first line or tensor that
differs. A git worktree of the commit before a refactor gives its src/:
`git worktree add /tmp/base <commit>`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
COMMON = ["model=tiny", "seed=3", "train.steps=4", "train.checkpoint_every=2", "train.report=false",
          "eval.every=2", "eval.limit=2", "eval.before=true", "eval.after=true", "task.name=arithmetic",
          "task.num_eval=4", "rollout.max_new_tokens=6", "eval.max_new_tokens=6"]
RL = ["rollout.prompts_per_step=2", "rollout.group_size=4", "train.micro_batch_size=4"]
CASES = {
    "rl-grpo": ["configs/quickstart.yaml", *RL, "algorithm.max_rounds=2"],
    "rl-ppo-gae": ["configs/ppo_gae.yaml", *RL],
    "rl-rloo-kl": ["configs/rloo.yaml", *RL, "algorithm.kl_coef=0.05"],
    "rl-reinforce-pp": ["configs/reinforce_pp.yaml", *RL],
    "rl-lora": ["configs/lora.yaml", *RL, "lora.rank=4"],
    "rl-partial": ["configs/quickstart.yaml", *RL, "rollout.partial_rollouts=1", "rollout.batch_size=12"],
    "sft": ["configs/sft_arithmetic.yaml", "train.micro_batch_size=4"],
    "dpo": ["configs/dpo_arithmetic.yaml", "dpo.batch_size=4"],
    "kto": ["configs/dpo_arithmetic.yaml", "dpo.loss=kto", "dpo.batch_size=6"],
    "rm": ["configs/rm_arithmetic.yaml"],
    "prm": ["configs/prm_arithmetic.yaml"],
}


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def fingerprint(run: Path) -> dict:
    """What a run must reproduce: metrics (timings aside), samples, and the final weights' hashes."""
    metrics = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in lines(run / "metrics.jsonl")]
    final = max((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))
    weights = {}
    for file in sorted(final.glob("*.safetensors")):
        for name, tensor in sorted(load_file(file).items()):
            weights[f"{file.name}:{name}"] = hashlib.sha256(tensor.float().numpy().tobytes()).hexdigest()[:16]
    return {"metrics": metrics, "samples": lines(run / "samples.jsonl"), "checkpoint": final.name, "weights": weights}


def run_case(name: str, src: Path, folder: Path) -> dict:
    config, *overrides = CASES[name]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(src),
           "AHA_VLLM_PYTHON": ""}
    # the aha imported must be the one under src (not the editable install's): checked in the process
    check = f"import sys, aha; assert aha.__file__.startswith({str(src)!r}), aha.__file__; "
    command = [sys.executable, "-c", check + "from aha.cli import main; sys.exit(main())", "train",
               str(ROOT / config), *COMMON, *overrides, f"output_dir={folder / name}"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        sys.exit(f"{name}: aha train failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return fingerprint(folder / name)


def first_difference(a, b, where: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{where}: {a!r} != {b!r}"
    if isinstance(a, dict):
        for key in sorted(a.keys() | b.keys()):
            if key not in a or key not in b:
                return f"{where}.{key}: only in {'after' if key not in a else 'before'}"
            found = first_difference(a[key], b[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} != {len(b)} items"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if a == b else f"{where}: {a!r} != {b!r}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the src/ folder to run (default: this tree's)")
    parser.add_argument("--out", type=Path, required=True, help="where to write the fingerprints (JSON)")
    parser.add_argument("--compare", type=Path, help="fingerprints of another tree to compare with")
    parser.add_argument("--only", nargs="+", choices=list(CASES), help="run only these cases")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="aha-same-") as tmp:
        for name in args.only or CASES:
            results[name] = run_case(name, args.src.resolve(), Path(tmp))
            print(f"{name}: {len(results[name]['metrics'])} metrics lines, {len(results[name]['weights'])} tensors",
                  flush=True)
    args.out.write_text(json.dumps(results, sort_keys=True))
    if not args.compare:
        return 0
    before = json.loads(args.compare.read_text())
    differ = 0
    for name in results:
        found = first_difference(before.get(name), results[name], name) if name in before else f"{name}: not in before"
        print(f"{name}: {'identical' if not found else 'DIFFERS at ' + found}")
        differ += bool(found)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
