"""Runs that several findings share: the demo's GRPO with a 48-token training budget (room for a
length to fall), 20 steps, held-out greedy accuracy every 5 steps. Claims that use GRPO48 train
it once (its runs live in runs/findings/grpo-48-tokens/); every claim built on it must use
COMMON, so the shared runs are the runs each page's command says."""

from runner import Condition

CONFIG = "configs/quickstart.yaml"
STEPS = 20
# one checkpoint a run (the last, 1.6 GB with the optimizer state): 20 runs would otherwise fill 64 GB
COMMON = ("rollout.max_new_tokens=48", f"train.steps={STEPS}", "eval.every=5", "train.report=false",
          "train.keep_checkpoints=1")
SEEDS = (0, 1)
GRPO48 = Condition("GRPO (clip-higher 0.28, the demo's)", (), runs="grpo-48-tokens")
