"""Every ready recipe in configs/ completes a short run on the tiny model and logs what it says."""

import json
from pathlib import Path

import pytest

from aha.config import load_config
from aha.training.rl import train

CONFIGS = Path(__file__).parent.parent / "configs"
RECIPES = ["quickstart", "grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "gspo", "ppo_gae"]
ALWAYS = ["loss/total", "loss/policy", "kl/old", "entropy", "policy/clip_frac", "advantage/mean",
          "groups/zero_variance_frac", "reward/mean", "length/mean", "grad_norm", "optimizer_steps"]


def test_every_recipe_is_tested():
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_runs_on_the_tiny_model(tmp_path, name):
    # the random tiny model never answers right; a reward that varies within groups keeps
    # every step informative, so dynamic sampling keeps groups and every recipe updates
    # (it also rarely stops, so truncated completions keep their score here)
    (tmp_path / "parity.py").write_text("def parity(completion, sample):\n    return float(len(completion) % 2)\n")
    config = load_config(CONFIGS / f"{name}.yaml", [
        f"reward=[{{fn: '{tmp_path / 'parity.py'}:parity'}}]",
        "model=tiny", f"output_dir={tmp_path / name}", "train.steps=2", "train.checkpoint_every=0",
        "train.micro_batch_size=4", "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
        "task.num_eval=4", "eval.before=false", "eval.max_new_tokens=6", "train.lr=1e-3",
        "algorithm.truncated_reward=null",
    ])
    summary = train(config, echo=lambda *_: None)
    records = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss/total" in r]
    assert len(steps) == 2 and summary.accuracy_after is not None
    algo = config.algorithm
    for r in steps:
        for key in ALWAYS:
            assert key in r, key
        assert r["optimizer_steps"] == algo.epochs * min(algo.mini_batches, r["groups/trained"])
        if algo.kl_coef:
            assert "kl/ref" in r and "loss/kl" in r
        if algo.advantage == "gae":
            assert "loss/value" in r and "value/mean" in r
