"""Held-out pairwise accuracy of a trained reward model under each ensemble score form, on
the committed synthetic arithmetic pairs (overall and per subset), in float32:

    python bench/reward_model_pairs.py runs/rm_ensemble mean min mean_minus_std
    python bench/reward_model_pairs.py runs/rm_arithmetic as_trained
"""
import json
import sys
from pathlib import Path

from aha.config import RewardSpec
from aha.rewards import build_reward

run, forms = sys.argv[1], sys.argv[2:]
PAIRS = Path(__file__).parent.parent / "data/synthetic/arithmetic/preferences_eval.jsonl"
rows = [json.loads(line) for line in open(str(PAIRS))]
samples = [{"id": r["id"], "prompt": r["prompt"]} for r in rows]
for form in forms:
    args = {} if form == "as_trained" else {"score": form}
    reward = build_reward([RewardSpec(model=run, args=args)], dtype="float32")
    chosen = reward.score([r["chosen"] for r in rows], samples).total
    rejected = reward.score([r["rejected"] for r in rows], samples).total
    right = (chosen > rejected).float()
    subsets = sorted({r["subset"] for r in rows})
    per = {s: round(float(right[[i for i, r in enumerate(rows) if r["subset"] == s]].mean()), 3) for s in subsets}
    print(json.dumps({"run": run, "score": form, "accuracy": round(float(right.mean()), 4), **per}), flush=True)
