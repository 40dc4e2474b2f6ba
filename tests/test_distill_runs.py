"""Distillation end to end on the tiny model: on-policy (algorithm.teacher, with and without the
task reward, the recipe), the teacher loaded on its own and frozen, the errors that name
algorithm.teacher; off-policy (`aha data --from-model`, then method: sft on what it wrote)."""

import json
from pathlib import Path

import pytest
import torch

from aha.cli import main
from aha.config import ConfigError, load_config
from aha.models import load
from aha.models.loading import LoadedModel
from aha.models.tiny import tiny_model, tiny_tokenizer
from aha.tasks import build_task
from aha.training.loop import train

CONFIGS = Path(__file__).parent.parent / "configs"
QUIET = lambda *_: None  # noqa: E731


@pytest.fixture(scope="module")
def teacher_folder(tmp_path_factory) -> Path:
    """Another tiny model (seed 1) with the tiny tokenizer, saved as a model folder."""
    folder = tmp_path_factory.mktemp("teacher")
    loaded = load("tiny", seed=1)
    loaded.model.save_pretrained(folder)
    loaded.tokenizer.save_pretrained(folder)
    return folder


def tiny_run(tmp_path, *overrides, name="run"):
    (tmp_path / "parity.py").write_text("def parity(completion, sample):\n    return float(len(completion) % 2)\n")
    return load_config(None, [
        "model=tiny", f"output_dir={tmp_path / name}", f"reward=[{{fn: '{tmp_path / 'parity.py'}:parity'}}]",
        "train.steps=2", "train.checkpoint_every=0", "rollout.prompts_per_step=2", "rollout.group_size=4",
        "rollout.max_new_tokens=6", "task.num_eval=4", "eval.before=false", "eval.max_new_tokens=6", "train.lr=1e-3",
        *overrides])


def lines(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def records(run_dir) -> list[dict]:
    return lines(Path(run_dir) / "metrics.jsonl")


@pytest.mark.parametrize("task_reward", [True, False])
def test_distillation_trains_end_to_end_on_the_tiny_model(tmp_path, teacher_folder, monkeypatch, task_reward):
    import aha.training.rl.method as rl_method

    built = []
    original = rl_method.build_learner
    monkeypatch.setattr(rl_method, "build_learner", lambda *a, **kw: built.append(original(*a, **kw)) or built[-1])
    config = tiny_run(tmp_path, f"algorithm.teacher={teacher_folder}", "algorithm.teacher_coef=0.5",
                      f"algorithm.task_reward={str(task_reward).lower()}",
                      f"algorithm.dynamic_sampling={str(task_reward).lower()}")
    summary = train(config, echo=QUIET)
    steps = [r for r in records(summary.run_dir) if "loss/total" in r]
    assert len(steps) == 2 and summary.accuracy_after is not None
    for r in steps:
        assert r["distill/reverse_kl"] != 0.0 and "reward/mean" in r  # the reward is scored and logged either way
        assert 0.0 < r["distill/advantage_share"] <= 1.0
        assert (r["distill/advantage_share"] == 1.0) is (not task_reward)
        assert r["train/nothing_to_train"] == 0.0 and r["grad_norm"] > 0
    (learner,) = built
    teacher, policy = learner.teacher, learner.model
    assert teacher is not None and teacher is not policy and not teacher.training
    assert not any(p.requires_grad for p in teacher.parameters())
    assert not {p.data_ptr() for p in teacher.parameters()} & {p.data_ptr() for p in policy.parameters()}
    saved, policy_start = load(str(teacher_folder)).model, load("tiny", seed=0).model
    for (name, p), q in zip(teacher.named_parameters(), saved.parameters()):
        assert torch.equal(p, q), name  # frozen: the teacher is its folder's weights, after training too
    assert any(not torch.equal(p, q) for p, q in zip(policy.parameters(), policy_start.parameters()))


def test_a_teacher_equal_to_the_policy_starts_at_zero_kl(tmp_path):
    """model tiny, teacher tiny (the same weights, loaded apart), the trainer's old log-probs:
    at step 1 the policy is the teacher and the logged reverse KL is exactly 0; at step 2 the
    policy has moved (on the task reward) and it is not."""
    summary = train(tiny_run(tmp_path, "algorithm.teacher=tiny", "algorithm.old_logprobs=trainer"), echo=QUIET)
    first, second = [r for r in records(summary.run_dir) if "loss/total" in r]
    assert first["distill/reverse_kl"] == 0.0 and first["distill/advantage_share"] == 0.0
    assert second["distill/reverse_kl"] != 0.0


def test_the_distill_recipe_runs_with_a_tiny_teacher(tmp_path, teacher_folder):
    """configs/distill.yaml as shipped, its teacher (the demo's GRPO checkpoint, absent on a
    fresh clone) replaced by a tiny model folder."""
    assert load_config(CONFIGS / "distill.yaml").algorithm.teacher == "runs/quickstart/checkpoints/step-20"
    config = load_config(CONFIGS / "distill.yaml", [
        "model=tiny", f"algorithm.teacher={teacher_folder}", f"output_dir={tmp_path / 'distill'}", "train.steps=2",
        "train.checkpoint_every=0", "eval.limit=2", "task.num_eval=4", "rollout.max_new_tokens=4",
        "eval.max_new_tokens=4", "rollout.prompts_per_step=2", "rollout.group_size=4"])
    assert not config.algorithm.task_reward and not config.algorithm.dynamic_sampling
    summary = train(config, echo=QUIET)
    steps = [r for r in records(summary.run_dir) if "loss/total" in r]
    assert len(steps) == 2 and all(r["distill/advantage_share"] == 1.0 and "reward/mean" in r for r in steps)


def test_a_missing_teacher_fails_before_the_policy_loads(tmp_path):
    """The policy is a missing folder too: the error names the teacher, so it came first."""
    config = tiny_run(tmp_path, "model=no/such/policy", "algorithm.teacher=no/such/teacher")
    with pytest.raises(ConfigError, match=r"algorithm.teacher: 'no/such/teacher' is neither a built-in model name"):
        train(config, echo=QUIET)
    assert not (tmp_path / "run").exists()


def test_a_teacher_with_another_vocabulary_is_refused(tmp_path):
    tokenizer = tiny_tokenizer()
    folder = tmp_path / "wide"
    tiny_model(len(tokenizer) + 8, seed=1).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    config = tiny_run(tmp_path, f"algorithm.teacher={folder}")
    with pytest.raises(ConfigError, match=rf"algorithm.teacher: .* vocabulary of {len(tokenizer) + 8} tokens, the "
                                          rf"policy {len(tokenizer)}"):
        train(config, echo=QUIET)
    from aha.training.rl.teacher import check_teacher

    policy = load("tiny", seed=0)
    other = tiny_tokenizer()
    other.add_tokens(["<extra>"])  # the same LM head, another tokenizer
    with pytest.raises(ConfigError, match="algorithm.teacher: 'x' has another tokenizer than the policy"):
        check_teacher(LoadedModel(load("tiny", seed=1).model, other, "x"), policy.model, policy.tokenizer)


# ---------------------------------------------------------------- off-policy: aha data --from-model


def test_teacher_rows_leave_out_cut_and_unverified_completions():
    from aha.eval.distill_data import teacher_rows

    problems = [{"id": "a", "prompt": "1 + 1?", "answer": 2}, {"id": "b", "prompt": [{"role": "user",
                                                                                      "content": "2 + 2?"}]}]
    drawn = {"a": [{"completion": "2", "truncated": False, "score": 1.0},
                   {"completion": "3 and on and on", "truncated": True, "score": 1.0},
                   {"completion": "3", "truncated": False, "score": 0.0}],
             "b": [{"completion": "  ", "truncated": False, "score": 1.0},
                   {"completion": "4", "truncated": False, "score": 0.9999999}]}
    assert [(r["id"], r["response"]) for r in teacher_rows(problems, drawn, False, "m")] == [("a", "2"), ("a", "3"),
                                                                                          ("b", "4")]
    kept = teacher_rows(problems, drawn, True, "m")
    assert kept == [{"id": "a", "prompt": "1 + 1?", "response": "2", "answer": 2, "score": 1.0, "model": "m"},
                    {"id": "b", "prompt": problems[1]["prompt"], "response": "4", "answer": None, "score": 0.9999999,
                     "model": "m"}]


@pytest.mark.parametrize("verified_only", [False, True])
def test_aha_data_from_model_writes_sft_data_that_sft_trains_on(tmp_path, teacher_folder, verified_only, capsys):
    """The tiny teacher answers 8 training prompts 4 times; the file holds its completions that
    ended, not blank (and, verified-only, those of odd length: the parity reward's full score), each with
    its problem's prompt; `method: sft` then trains on it."""
    (tmp_path / "parity.py").write_text("def parity(completion, sample):\n    return float(len(completion) % 2)\n")
    overrides = ["model=tiny", f"reward=[{{fn: '{tmp_path / 'parity.py'}:parity'}}]", "rollout.max_new_tokens=48"]
    args = ["data", *overrides, "--out", str(tmp_path / "out"), "--from-model", str(teacher_folder),
            "--per-prompt", "4", "--limit", "8", *(["--verified-only"] if verified_only else [])]
    assert main(args) == 0
    assert "SFT rows to" in capsys.readouterr().out
    drawn = lines(tmp_path / "out/teacher_samples/samples.jsonl")
    assert len(drawn) == 32
    rows = lines(tmp_path / "out/teacher_sft.jsonl")
    ended = [s for s in drawn if not s["truncated"] and s["completion"].strip()
             and (not verified_only or s["score"] == 1.0)]
    assert 0 < len(rows) == len(ended) < 32
    assert [r["response"] for r in rows] == [s["completion"] for s in ended]
    train_prompts = {p["id"]: p["prompt"] for p in build_task(load_config(None, overrides).task, ".").train[:8]}
    assert all(train_prompts[r["id"]] == r["prompt"] for r in rows)
    if verified_only:
        assert all(len(r["response"]) % 2 == 1 for r in rows)
    assert main(args) == 0  # a rerun draws nothing new: the cache holds every sample
    assert lines(tmp_path / "out/teacher_samples/samples.jsonl") == drawn
    config = load_config(None, ["model=tiny", "method=sft", f"sft.data={tmp_path / 'out/teacher_sft.jsonl'}",
                                f"output_dir={tmp_path / 'sft'}", "train.steps=2", "train.checkpoint_every=0",
                                "sft.batch_size=2", "eval.before=false", "eval.limit=2", "task.num_eval=4",
                                "eval.max_new_tokens=4"])
    train(config, echo=QUIET)
    assert [r["step"] for r in records(tmp_path / "sft") if "sft/loss" in r] == [1, 2]


def test_aha_data_flags_of_from_model_alone_are_refused(tmp_path, capsys):
    assert main(["data", "--out", str(tmp_path), "--verified-only"]) == 2
    assert "--verified-only and --limit are for --from-model" in capsys.readouterr().err
