"""Every ready recipe in configs/ completes a short run on the tiny model and logs what it says."""

import json
from pathlib import Path

import pytest
from tiny_recipes import tiny_overrides

from aha.config import load_config
from aha.training.loop import train

CONFIGS = Path(__file__).parent.parent / "configs"
RECIPES = ["quickstart", "grpo", "dr_grpo", "dapo", "rloo", "reinforce_pp", "gspo", "ppo_gae", "lora", "ray_async",
           "procedural", "try_again", "curriculum", "sapo", "laser_d", "adlp_per_prompt", "expo"]
ALWAYS = ["loss/total", "loss/policy", "kl/old", "entropy", "policy/clip_frac", "advantage/mean",
          "groups/zero_variance_frac", "reward/mean", "length/mean", "grad_norm", "optimizer_steps"]


# recipes of the other methods, on the committed synthetic data (sft_then_grpo starts from sft's checkpoint)
METHOD_RECIPES = ["sft_arithmetic", "dpo_arithmetic", "rm_arithmetic", "prm_arithmetic", "rft_arithmetic",
                  "dpo_tdpo"]


def test_every_recipe_is_tested():
    # distill: tests/test_distill_runs.py::test_the_distill_recipe_runs_with_a_tiny_teacher (its teacher is a run's)
    # rm_online: tests/test_online_rm.py::test_the_rm_online_recipe_runs_with_a_tiny_reward_model (its reward model is
    # a run's)
    # prm_grpo_steps: tests/test_step_rewards.py::test_the_prm_grpo_steps_recipe_runs_with_a_tiny_prm (its PRM is a
    # run's)
    # rubric_checklist: tests/test_rubrics.py::test_the_rubric_checklist_recipe_runs_with_a_tiny_judge
    # tool_lookup, sql_shop: tests/test_user_tools.py, tests/test_sql_reward.py (their JSONL tasks and tool/database)
    # mixture: tests/test_mixture.py::test_the_mixture_recipe_runs_on_the_tiny_model (its tasks are a list)
    # judge_training, pairwise_judge: tests/test_pairwise.py (aha data --judge-from's prompts; a tiny judge)
    listed = RECIPES + METHOD_RECIPES + ["judge_monitor", "sft_then_grpo", "distill", "rm_online", "urpo", "verifree",
                                                    "prm_grpo_steps", "rubric_checklist", "tool_lookup", "sql_shop",
                                                    "mixture", "judge_training", "pairwise_judge", "language_ru"]
    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(listed)


SHORT = ["model=tiny", "train.steps=2", "train.checkpoint_every=0", "eval.limit=2", "task.name=arithmetic",
         "task.num_eval=4",
         "rollout.max_new_tokens=4", "eval.max_new_tokens=4"]


@pytest.mark.parametrize("name", METHOD_RECIPES)
def test_method_recipe_runs_on_the_tiny_model(tmp_path, name):
    config = load_config(CONFIGS / f"{name}.yaml", SHORT + [f"output_dir={tmp_path / name}"])
    assert config.method == name.split("_")[0]
    train(config, echo=lambda *_: None)
    steps = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if "time/step_s" in r] == [1, 2]
    assert any(k.startswith(("eval/", "pref_eval/", "rm_eval/", "prm_eval/")) for r in steps for k in r)


def test_sft_then_grpo_recipe_starts_from_the_sft_checkpoint(tmp_path):
    train(load_config(CONFIGS / "sft_arithmetic.yaml", SHORT + [f"output_dir={tmp_path / 'sft'}"]),
          echo=lambda *_: None)
    config = load_config(CONFIGS / "sft_then_grpo.yaml", SHORT + [f"output_dir={tmp_path / 'rl'}",
                         f"model={tmp_path / 'sft/checkpoints/step-2'}", "rollout.prompts_per_step=2",
                         "rollout.group_size=2", "algorithm.dynamic_sampling=false"])
    assert load_config(CONFIGS / "sft_then_grpo.yaml").model == "runs/sft_arithmetic/checkpoints/step-17"
    train(config, echo=lambda *_: None)
    assert (tmp_path / "rl/checkpoints/step-2").is_dir()


def test_judge_monitor_recipe_runs_with_a_tiny_judge(tmp_path):
    """The recipe as shipped, with the tiny model as policy and judge: the judge's grades are
    the trained reward, the gold verifier is logged beside them."""
    config = load_config(CONFIGS / "judge_monitor.yaml", tiny_overrides(
        tmp_path / "run", "task.num_eval=4",
        "eval.before=false", "eval.after=false", "algorithm.truncated_reward=null", "algorithm.dynamic_sampling=false",
        "reward=[{fn: rubric_judge, name: judge, args: {rubric: 'Correct product.', model: tiny, show_reference: "
        "false}}]",
    ))
    assert config.monitor.gold[0].fn == "numeric_answer"
    summary = train(config, echo=lambda *_: None)
    steps = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    for r in steps:
        assert 0.0 < r["reward/judge"] < 1.0 and r["reward/failed"] == 0
        assert "monitor/gold_mean" in r and "monitor/repetition" in r


def test_verifree_recipe_runs_on_the_tiny_model(tmp_path):
    """The recipe as shipped on the tiny model: the policy's likelihood of the reference answer
    is the only reward, the gold verifier is logged beside it."""
    config = load_config(CONFIGS / "verifree.yaml", tiny_overrides(
        tmp_path / "run", "task.num_eval=4",
        "eval.before=false", "eval.after=false", "algorithm.dynamic_sampling=false", "train.dtype=float32",
        "algorithm.truncated_reward=null",  # the tiny model never stops: keep its likelihood
    ))
    assert config.reward == [] and config.likelihood_reward.weight == 1.0
    summary = train(config, echo=lambda *_: None)
    steps = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    for r in steps:
        assert 0.0 < r["reward/likelihood"] < 1.0 and r["reward/mean"] == pytest.approx(r["reward/likelihood"])
        assert "monitor/gold_mean" in r and "loss/policy" in r


def test_urpo_recipe_runs_on_the_tiny_model(tmp_path):
    """The recipe as shipped on the tiny model: the referee's P(yes) is the only reward, the gold
    verifier is logged beside it; numeric_answer marks the tiny model's random text wrong, so no
    balanced judge prompts are found, and the metrics say so."""
    config = load_config(CONFIGS / "urpo.yaml", tiny_overrides(
        tmp_path / "run", "task.num_eval=4",
        "eval.before=false", "eval.after=false", "algorithm.dynamic_sampling=false", "train.dtype=float32",
    ))
    assert config.reward == [] and config.referee.verifier == config.monitor.gold[0].fn == "numeric_answer"
    summary = train(config, echo=lambda *_: None)
    steps = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    for r in steps:
        assert 0.0 < r["reward/referee"] < 1.0 and r["reward/mean"] == pytest.approx(r["reward/referee"])
        assert r["referee/right_frac"] == 0.0 and r["referee/judged"] == r["referee/groups"] == 0
        assert "monitor/gold_mean" in r and "referee/agreement" in r and "loss/policy" in r


@pytest.mark.parametrize("name", RECIPES)
def test_recipe_runs_on_the_tiny_model(tmp_path, name):
    # the random tiny model never answers right; a reward that varies within groups keeps
    # every step informative, so dynamic sampling keeps groups and every recipe updates
    # (it also rarely stops, so truncated completions keep their score here)
    (tmp_path / "parity.py").write_text("def parity(completion, sample):\n    return float(len(completion) % 2)\n")
    config = load_config(CONFIGS / f"{name}.yaml", [
        f"reward=[{{fn: '{tmp_path / 'parity.py'}:parity'}}]", *tiny_overrides(
            tmp_path / name, "train.micro_batch_size=4", "task.num_eval=4", "eval.before=false",
            "eval.max_new_tokens=6", "train.lr=1e-3", "algorithm.truncated_reward=null")])
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
        if algo.length_shaping == "laser_d":
            assert "laser/target_mean" in r and "laser/bonus_frac" in r
        if algo.guidance == "expo":
            assert r["guidance/retries"] == 2 * r["guidance/unsolved_groups"]
        if algo.length_adaptive_per == "prompt":
            assert "length/penalty_coef" in r and r["length/prompts_tracked"] >= 2


def test_language_ru_recipe_pays_the_verifier_and_half_the_script_share(tmp_path):
    """The recipe as shipped on the tiny model: numeric_answer and the Cyrillic share are each
    logged, and the total is the verifier plus half the share."""
    config = load_config(CONFIGS / "language_ru.yaml", tiny_overrides(
        tmp_path / "run", "task.num_eval=4", "eval.before=false", "eval.after=false",
        "algorithm.truncated_reward=null"))  # the tiny model never stops: keep what it is paid
    assert [(r.fn, r.weight) for r in config.reward] == [("numeric_answer", 1.0), ("language_consistency", 0.5)]
    summary = train(config, echo=lambda *_: None)
    steps = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    for r in steps:
        assert 0.0 <= r["reward/russian"] <= 1.0 and r["reward/failed"] == 0
        assert r["reward/mean"] == pytest.approx(r["reward/numeric_answer"] + 0.5 * r["reward/russian"], abs=1e-6)
