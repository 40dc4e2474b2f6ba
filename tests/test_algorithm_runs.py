"""Algorithm options in the real loop on the tiny model: each learns, logs what it says,
resumes exactly, and rejects inconsistent settings up front."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_training import metrics, tiny_config

from aha.config import ConfigError, load_config
from aha.rollout import Rollouts
from aha.training.loop import train
from aha.training.rl.batch import Batch
from aha.training.rl.replay import ReplayBuffer

QUIET = lambda *_: None
# Tests that compare model numbers at fp32 tolerances pin the compute dtype: with
# train.dtype=auto a CPU with native bf16 (AVX512-BF16, AMX) would run them under bf16
# autocast, where the engine and the trainer round apart by ~4e-4. tests/test_precision.py
# and test_bf16_training_step_* force the bf16 path, so it runs on every CPU.
FP32 = "train.dtype=float32"


def say_seven(tmp_path, *overrides):
    """A task the random tiny model can learn in 30 steps: say "7" as often as possible."""
    with open(tmp_path / "train.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"prompt": f"say {i}", "answer": "7"}) + "\n")
    (tmp_path / "test.jsonl").write_text('{"prompt": "tell 1", "answer": "7"}\n')
    (tmp_path / "sevens.py").write_text(
        "def hits(completion, sample):\n    return completion.count('7') / max(len(completion), 1)\n")
    (tmp_path / "seven.yaml").write_text(
        f"model: tiny\noutput_dir: {tmp_path / 'run'}\n"
        "train: {steps: 30, lr: 3.0e-3, checkpoint_every: 0, report: false, dtype: float32}\n"
        "rollout: {prompts_per_step: 4, group_size: 8, max_new_tokens: 6}\n"
        "task: {data: train.jsonl, eval_data: test.jsonl}\n"
        "reward: [{fn: 'sevens.py:hits'}]\n"
        "eval: {before: false, after: true, scorer: 'sevens.py:hits', max_new_tokens: 6}\n")
    return load_config(tmp_path / "seven.yaml", list(overrides))


@pytest.mark.parametrize("overrides", [
    ["algorithm.advantage=rloo", "algorithm.policy_loss=pg", "algorithm.loss_agg=seq_mean_token_sum"],
    ["algorithm.advantage=reinforce_pp"],
    ["algorithm.advantage=remax", "algorithm.policy_loss=pg", "algorithm.loss_agg=seq_mean_token_sum"],
    ["algorithm.advantage=gae", "algorithm.whiten_advantages=true", "algorithm.critic_lr=1e-3"],
    ["algorithm.advantage_scale=none", "algorithm.loss_agg=constant"],
    ["algorithm.policy_loss=gspo", "algorithm.loss_agg=seq_mean_token_mean", "algorithm.mini_batches=2",
     "algorithm.clip_low=3e-4", "algorithm.clip_high=4e-4"],
    ["algorithm.policy_loss=cispo", "algorithm.clip_low=1.0"],
    ["algorithm.token_weighting=ktae", "algorithm.dual_clip=3.0", "algorithm.epochs=2"],
], ids=["rloo", "reinforce_pp", "remax", "ppo_gae", "dr_grpo", "gspo", "cispo", "ktae_dualclip_epochs"])
def test_each_estimator_and_loss_learns(tmp_path, overrides):
    summary = train(say_seven(tmp_path, *overrides), echo=QUIET)
    hits = [r["reward/mean"] for r in metrics(Path(summary.run_dir)) if "reward/mean" in r]
    first, last = sum(hits[:3]) / 3, sum(hits[-5:]) / 5
    assert first < 0.1  # a random model rarely says "7"
    assert last > 3 * first  # samples say it more often...
    assert summary.accuracy_after > 0.5  # ...and the greedy answer is mostly 7s


def test_prorl_reset_makes_the_policy_the_new_reference(tmp_path):
    config = tiny_config(tmp_path, "prorl", FP32, "algorithm.kl_coef=0.1", "algorithm.ref_reset_every=2",
                         "train.steps=5", "eval.before=false", "eval.after=false")
    records = [r for r in metrics(Path(train(config, echo=QUIET).run_dir)) if "kl/ref" in r]
    assert [r["step"] for r in records if r.get("ref/reset")] == [2, 4]
    # one optimizer step per RL step: right after a reset the policy equals the reference
    assert records[2]["kl/ref"] == pytest.approx(0.0, abs=1e-7)  # step 3
    assert records[1]["kl/ref"] > 1e-6  # step 2 had drifted


def test_prorl_reset_on_a_kl_threshold(tmp_path):
    config = tiny_config(tmp_path, "prorl_kl", FP32, "algorithm.kl_coef=0.1", "algorithm.ref_reset_kl=1e-9",
                         "train.steps=4", "eval.before=false", "eval.after=false")
    records = metrics(Path(train(config, echo=QUIET).run_dir))
    # the logged KL is measured before the step's update: step 1 starts at the reference
    # (0, no reset), step 2 has drifted (reset), step 3 starts at the new reference, ...
    assert [r.get("ref/reset", 0) for r in records] == [0, 1, 0, 1]
    assert records[2]["kl/ref"] == pytest.approx(0.0, abs=1e-7) and records[1]["kl/ref"] > 1e-9


def test_kl_in_the_reward_is_logged(tmp_path):
    config = tiny_config(tmp_path, "klr", FP32, "algorithm.kl_coef=0.1", "algorithm.kl_in=reward",
                         "algorithm.kl_estimator=k1", "eval.before=false", "eval.after=false")
    records = metrics(Path(train(config, echo=QUIET).run_dir))
    assert all("kl/ref" in r and "loss/kl" not in r for r in records)
    assert records[0]["kl/ref"] == pytest.approx(0.0, abs=1e-4)  # sampled by the reference itself


def test_trainer_logprobs_and_truncated_importance_sampling(tmp_path):
    config = tiny_config(tmp_path, "tis", FP32, "algorithm.old_logprobs=trainer", "algorithm.tis_cap=2.0",
                         "eval.before=false", "eval.after=false")
    for r in metrics(Path(train(config, echo=QUIET).run_dir)):
        assert r["logprobs/engine_trainer_abs_diff"] < 1e-4  # same fp32 model on both sides
        assert r["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-6)  # ratio is against the trainer


def test_bf16_training_step_under_autocast_keeps_fp32_weights(tmp_path, caplog):
    # forced, so it runs on every CPU (emulated bf16 is slow, but this is one step of the tiny model)
    config = tiny_config(tmp_path, "bf16", "train.dtype=bfloat16", "algorithm.old_logprobs=trainer",
                         "algorithm.tis_cap=2.0", "train.steps=1", "train.checkpoint_every=1",
                         "eval.before=false", "eval.after=false")
    with caplog.at_level("INFO", logger="aha.training.rl.method"):
        run = Path(train(config, echo=QUIET).run_dir)
    assert "compute dtype torch.bfloat16" in caplog.text
    (r,) = metrics(run)
    # engine and trainer both run bf16 matmuls and may round apart (~4e-4 on the tiny model
    # before the lean decoding step and the packed head; since then, identically here)
    assert 0 <= r["logprobs/engine_trainer_abs_diff"] < 5e-3
    assert r["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-3)  # against the trainer's own bf16 log-probs
    assert r["grad_norm"] > 0 and r["loss/total"] == r["loss/total"]  # not NaN
    weights = load_file(run / "checkpoints/step-1/model.safetensors")
    assert weights and all(w.dtype == torch.float32 for w in weights.values())  # fp32 master weights


def test_masking_truncated_completions_removes_exactly_their_tokens(tmp_path):
    common = ["rollout.max_new_tokens=2", "eval.before=false", "eval.after=false", "train.steps=1"]
    plain = metrics(Path(train(tiny_config(tmp_path, "plain", *common), echo=QUIET).run_dir))[0]
    masked = metrics(Path(train(tiny_config(tmp_path, "mask", *common, "algorithm.mask_truncated=true"),
                                echo=QUIET).run_dir))[0]
    truncated_rows = round(plain["length/truncated_frac"] * 12)  # 3 prompts x 4 samples, same seed: same samples
    assert truncated_rows > 0
    # a truncated completion has exactly max_new_tokens = 2 tokens
    assert masked["tokens/trained"] == plain["tokens/trained"] - 2 * truncated_rows


def test_non_finite_rewards_are_failed_samples_in_the_loop(tmp_path):
    # a reward function that breaks on about half the completions, with NaN or inf
    (tmp_path / "broken.py").write_text(
        "def score(completion, sample):\n"
        "    first = ord(completion[:1] or ' ') % 4\n"
        "    return float('nan') if first == 0 else float('inf') if first == 1 else ord(completion[-1]) % 5\n")
    config = tiny_config(tmp_path, "nan", f"reward=[{{fn: '{tmp_path / 'broken.py'}:score'}}]",
                         "algorithm.dynamic_sampling=true", "algorithm.max_rounds=1", "train.steps=2",
                         "train.checkpoint_every=2", "eval.before=false", "eval.after=false",
                         "train.max_reward_failure_rate=1.0")
    run = Path(train(config, echo=QUIET).run_dir)
    records = metrics(run)
    # a NaN or inf reward is a failed sample (scored 0, counted), so none reaches the advantages
    assert sum(r["reward/failed"] for r in records) > 0 and any("loss/total" in r for r in records)
    for r in records:
        if "loss/total" in r:
            assert all(r[k] == r[k] and abs(r[k]) != float("inf")
                       for k in ("loss/total", "grad_norm", "advantage/abs_mean", "kl/old"))
    weights = load_file(run / "checkpoints/step-2/model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_soft_overlong_punishment(tmp_path):
    (tmp_path / "const.py").write_text("def one(completion, sample):\n    return 1.0\n")
    config = tiny_config(tmp_path, "long", "algorithm.overlong_buffer=3", "rollout.max_new_tokens=3",
                         f"reward=[{{fn: '{tmp_path / 'const.py'}:one'}}]", "eval.before=false", "eval.after=false")
    for r in metrics(Path(train(config, echo=QUIET).run_dir)):
        # buffer = the whole budget: reward 1 - length / 3 for every sample
        assert r["reward/mean"] == pytest.approx(1.0 - r["length/mean"] / 3, abs=1e-6)


@pytest.mark.parametrize("reward_value, start, penalize, expected_coefs", [
    (1.0, 0.0, "correct", [0.0, 0.05, 0.1, 0.15]),  # always right: the penalty grows by 0.1 * (1 - 0.5) each step
    (0.0, 0.3, "correct", [0.3, 0.25, 0.2, 0.15]),  # always wrong: it relaxes (and wrong answers pay nothing)
    (0.0, 0.3, "all", [0.3, 0.25, 0.2, 0.15]),  # A-DLP's form: wrong answers pay too
])
def test_adaptive_length_penalty_in_the_loop(tmp_path, reward_value, start, penalize, expected_coefs):
    (tmp_path / "const.py").write_text(f"def value(completion, sample):\n    return {reward_value}\n")
    config = tiny_config(tmp_path, "adaptive", f"reward=[{{fn: '{tmp_path / 'const.py'}:value'}}]",
                         "algorithm.length_adaptive=true", "algorithm.length_target_acc=0.5",
                         "algorithm.length_coef_rate=0.1", f"algorithm.length_coef={start}",
                         "algorithm.length_correct_min=1.0", f"algorithm.length_penalize={penalize}",
                         "eval.before=false", "eval.after=false")
    records = [r for r in metrics(Path(train(config, echo=QUIET).run_dir)) if "reward/mean" in r]
    assert [round(r["length/penalty_coef"], 6) for r in records] == expected_coefs
    for r in records:  # max_new_tokens = 6: reward = value - coef * length / 6 on correct completions
        charged = reward_value >= 1.0 or penalize == "all"
        expected = reward_value - r["length/penalty_coef"] * r["length/mean"] / 6 * charged
        assert r["reward/mean"] == pytest.approx(expected, abs=1e-6)


def test_reward_dithering_makes_tied_groups_informative(tmp_path):
    (tmp_path / "const.py").write_text("def one(completion, sample):\n    return 1.0\n")
    common = [f"reward=[{{fn: '{tmp_path / 'const.py'}:one'}}]", "algorithm.dynamic_sampling=true",
              "algorithm.max_rounds=1", "eval.before=false", "eval.after=false", "train.steps=2"]
    plain = metrics(Path(train(tiny_config(tmp_path, "plain", *common), echo=QUIET).run_dir))
    assert all(r["groups/trained"] == 0 and "loss/total" not in r for r in plain)  # every group ties
    noisy = metrics(Path(train(tiny_config(tmp_path, "noisy", *common, "algorithm.reward_noise=0.1"),
                               echo=QUIET).run_dir))
    for r in noisy:
        assert r["groups/zero_variance_frac"] == 1.0  # the verifier still ties...
        assert r["groups/trained"] == 3 and r["grad_norm"] > 0  # ...but dithered rewards give a gradient


def test_dense_rewards_that_tie_in_total_but_land_on_different_tokens_keep_their_group(tmp_path):
    # every completion is worth 1.0 in total, paid at its first character or at its end: with a
    # token-level estimator the group still differs token by token, so dynamic sampling keeps it
    (tmp_path / "where.py").write_text(
        "from aha.rewards import StepScores\n"
        "def where(completion, sample):\n"
        "    if not completion:\n"
        "        return 1.0\n"
        "    return StepScores((1 if len(completion) % 2 else len(completion),), (1.0,))\n")
    common = [f"reward=[{{fn: '{tmp_path / 'where.py'}:where'}}]", "algorithm.dynamic_sampling=true",
              "algorithm.max_rounds=1", "eval.before=false", "eval.after=false", "train.steps=2"]
    dense = metrics(Path(train(tiny_config(tmp_path, "dense", *common, "algorithm.advantage=reinforce_pp"),
                               echo=QUIET).run_dir))
    assert all(r["groups/zero_variance_frac"] == 1.0 for r in dense)  # the totals tie...
    assert sum(r["groups/trained"] for r in dense) > 0 and all(r["grad_norm"] > 0 for r in dense if r["groups/trained"])
    outcome = metrics(Path(train(tiny_config(tmp_path, "grpo", *common), echo=QUIET).run_dir))
    assert all(r["groups/trained"] == 0 for r in outcome)  # ...and group-relative advantages see only totals


def test_replay_buffer_keeps_informative_groups_and_fills_by_priority():
    G, rows = 2, 6
    ro = Rollouts(torch.zeros(rows, 2, dtype=torch.long), torch.ones(rows, 2, dtype=torch.long),
                  torch.zeros(rows, 3, dtype=torch.long), torch.ones(rows, 3), torch.zeros(rows, 3),
                  torch.arange(rows) // G, [""] * rows, torch.zeros(rows, dtype=torch.bool))
    adv = torch.tensor([[1.0], [-1.0], [0.0], [0.0], [3.0], [-3.0]]).expand(rows, 3).clone()
    batch = Batch(ro, torch.zeros(rows), advantages=adv)
    buffer = ReplayBuffer(capacity=10, alpha=1.0, group_size=G)
    buffer.add(batch)
    assert len(buffer.groups) == 2  # the flat middle group is not stored
    torch.manual_seed(0)
    picks = []
    for _ in range(400):
        filled, n = buffer.fill(None, 1, pad_id=0)
        picks.append(float(filled.advantages.abs().max()))
    assert n == 1 and 0.7 < picks.count(3.0) / len(picks) < 0.8  # |A| 3 vs 1: drawn 3/4 of the time
    filled, n = buffer.fill(batch, 5, pad_id=0)
    assert n == 2 and len(filled) == 10  # 3 fresh groups + both stored ones
    small = ReplayBuffer(capacity=1, alpha=1.0, group_size=G)
    small.add(batch)
    assert len(small.groups) == 1 and float(small.groups[0].advantages.abs().max()) == 3.0  # oldest dropped


def test_replay_fills_steps_in_the_loop(tmp_path):
    config = tiny_config(tmp_path, "replay", "algorithm.replay=true", "algorithm.dynamic_sampling=true",
                         "algorithm.max_rounds=1", "eval.before=false", "eval.after=false", "train.steps=6")
    records = metrics(Path(train(config, echo=QUIET).run_dir))
    assert all("replay/groups" in r for r in records)
    assert any(r["replay/groups"] > 0 for r in records)
    for r in records:  # a step trains on fresh informative groups plus replayed ones, at most 3
        assert r["replay/groups"] + r["groups/trained"] <= 3


@pytest.mark.parametrize("extra", [
    ["algorithm.advantage=gae"],
    ["algorithm.replay=true", "algorithm.mini_batches=2", "algorithm.epochs=2"],
    ["algorithm.kl_coef=0.1", "algorithm.ref_reset_every=3"],
    ["algorithm.length_adaptive=true", "algorithm.length_target_acc=0", "algorithm.length_correct_min=0",
     "algorithm.length_coef_rate=0.1"],
], ids=["critic", "replay_minibatches", "prorl", "adaptive_length"])
def test_resume_is_exact_with_critic_replay_and_reference_resets(tmp_path, extra):
    straight = train(tiny_config(tmp_path, "straight", *extra), echo=QUIET)
    train(tiny_config(tmp_path, "resumed", *extra, "train.steps=2"), echo=QUIET)
    resumed = train(tiny_config(tmp_path, "resumed", *extra), echo=QUIET)
    for name in ("model", "critic", "reference"):
        a_path = Path(straight.run_dir) / f"checkpoints/step-4/{name}.safetensors"
        if not a_path.exists():
            continue
        a, b = load_file(a_path), load_file(Path(resumed.run_dir) / f"checkpoints/step-4/{name}.safetensors")
        for key in a:
            assert torch.equal(a[key], b[key]), (name, key)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs if "reward/mean" in r]
    assert strip(metrics(Path(straight.run_dir))) == strip(metrics(Path(resumed.run_dir)))


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.policy_loss=pg", "algorithm.epochs=2"], "policy_loss=pg is on-policy only"),
    (["algorithm.tis_cap=2"], "tis_cap needs algorithm.old_logprobs=trainer"),
    (["algorithm.ref_reset_every=5"], "need algorithm.kl_coef > 0"),
    (["algorithm.replay=true", "algorithm.advantage=gae"], "replay does not work with advantage=gae"),
    (["algorithm.overlong_buffer=99"], r"overlong_buffer \(99\) exceeds rollout.max_new_tokens \(6\)"),
    (["algorithm.advantage=rloo", "rollout.group_size=1"], "group_size must be >= 2 with algorithm.advantage=rloo"),
    (["algorithm.token_weighting=ktae", "algorithm.advantage=gae"], "token_weighting=ktae needs a sequence-level "
            "advantage"),
    (["algorithm.dual_clip=0.5"], r"config key 'algorithm.dual_clip'"),
    (["algorithm.policy_loss=trpo"], r"config key 'algorithm.policy_loss'"),
])
def test_inconsistent_algorithm_settings_are_rejected_at_load(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(tmp_path, "bad", *overrides)
