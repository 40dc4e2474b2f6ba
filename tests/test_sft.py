"""method: sft on the tiny model: the loss is the response tokens' NLL (checked against a plain
forward pass), micro-batching and bucketing do not change the update, it learns, resumes
exactly, chains into rl, and bad data names its file and line."""

import json

import pytest
import torch
from test_training import assert_resumes_exactly, config_with_data, metrics

from aha.config import load_config
from aha.models import load
from aha.tasks import TaskError, encode_prompts
from aha.tasks.base import Task
from aha.training.loop import train

ROWS = [{"prompt": f"What is {a} * {b}?", "response": f"{a} * {b} = {a * b}."} for a, b in
        [(3, 4), (5, 6), (7, 8), (2, 9), (6, 6), (4, 7)]]

SFT = """
method: sft
model: tiny
output_dir: {out}
task: {{name: arithmetic, a_max: 20, num_eval: 12}}
sft: {{data: {data}, batch_size: 4}}
rollout: {{max_new_tokens: 8}}
train: {{steps: 4, lr: 1.0e-2, checkpoint_every: 2, keep_checkpoints: 5, micro_batch_size: 4, report: false,
        dtype: float32}}
eval: {{before: false, after: false}}
"""


def sft_config(tmp_path, name="run", *overrides, rows=ROWS):
    return config_with_data(tmp_path, SFT, name, overrides, "sft.jsonl", rows)


def response_nll(model, tokenizer, rows) -> float:
    """The mean NLL of response tokens + EOS, from one plain forward pass per example."""
    task = Task("t", [], [])
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            prompt = encode_prompts(tokenizer, task, [row])[0]
            response = tokenizer(row["response"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            ids = torch.tensor([prompt + response])
            logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
            for k, token in enumerate(response):
                total -= float(logp[len(prompt) + k - 1, token])
                count += 1
    return total / count


def test_the_sft_loss_is_the_nll_of_response_tokens_only(tmp_path):
    # lr 0: the step's logged loss is the initial model's loss on the whole data (batch = all 6)
    train(sft_config(tmp_path, "run", "train.lr=0", "sft.batch_size=6", "train.steps=1"), echo=lambda *_: None)
    record = metrics(tmp_path / "run")[0]
    tiny = load("tiny")
    assert record["sft/loss"] == pytest.approx(response_nll(tiny.model, tiny.tokenizer, ROWS), rel=1e-5)
    assert record["sft/tokens"] == sum(len(r["response"]) + 1 for r in ROWS)  # one token per character, + EOS


def test_micro_batches_and_length_buckets_do_not_change_the_update(tmp_path):
    # the gradient norm (before clipping) and the losses are those of the whole batch: each
    # micro-batch's loss is divided by the batch's token count, not its own
    runs = {}
    for name, overrides in {"whole": ["train.micro_batch_size=64", "sft.bucket_by_length=false"],
                            "micro": ["train.micro_batch_size=1", "sft.bucket_by_length=true"],
                            "bucketed": ["train.micro_batch_size=4", "sft.bucket_by_length=true"]}.items():
        train(sft_config(tmp_path, name, "train.steps=2", "sft.batch_size=6", "train.max_grad_norm=1e9", *overrides),
              echo=lambda *_: None)
        runs[name] = [(r["sft/loss"], r["grad_norm"]) for r in metrics(tmp_path / name)]
    for name in ("micro", "bucketed"):
        for (loss, norm), (whole_loss, whole_norm) in zip(runs[name], runs["whole"]):
            assert loss == pytest.approx(whole_loss, rel=1e-5) and norm == pytest.approx(whole_norm, rel=1e-5)


def test_sft_learns_the_responses(tmp_path):
    train(sft_config(tmp_path, "run", "train.steps=30", "sft.batch_size=6", "train.lr=5e-3"), echo=lambda *_: None)
    losses = [r["sft/loss"] for r in metrics(tmp_path / "run") if "sft/loss" in r]
    assert losses[-1] < 0.25 * losses[0], losses
    samples = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert {s["completion"] for s in samples} <= {r["response"] for r in ROWS}


def test_sft_resumes_exactly(tmp_path):
    assert_resumes_exactly(tmp_path, sft_config)


def test_an_sft_checkpoint_is_the_model_of_an_rl_run(tmp_path):
    train(sft_config(tmp_path, "sft", "train.steps=2"), echo=lambda *_: None)
    checkpoint = tmp_path / "sft/checkpoints/step-2"
    rl = load_config(None, [f"model={checkpoint}", f"output_dir={tmp_path / 'rl'}", "train.steps=1",
                            "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
                            "eval.before=false", "eval.after=false", "train.report=false",
                            "task.name=arithmetic", "task.a_max=20", "task.num_eval=12"])
    train(rl, echo=lambda *_: None)
    assert [r["step"] for r in metrics(tmp_path / "rl")] == [1]
    assert "reward/mean" in metrics(tmp_path / "rl")[0]


def test_a_response_past_max_length_loses_its_end_and_is_counted(tmp_path):
    rows = [{"prompt": "Hi", "response": "x" * 200}] * 2
    train(sft_config(tmp_path, "run", "train.steps=1", "sft.max_length=40", "sft.batch_size=2", rows=rows),
          echo=lambda *_: None)
    record = metrics(tmp_path / "run")[0]
    assert record["sft/truncated"] == 2
    prompt_tokens = len(encode_prompts(load("tiny").tokenizer, Task("t", [], []), rows[:1])[0])
    assert record["sft/tokens"] == 2 * (40 - prompt_tokens)


@pytest.mark.parametrize("line, message", [
    ('{"prompt": "What is 2 * 3?"}', "sft.jsonl:2: missing field(s) response"),
    ('{"prompt": "What is 2 * 3?", "response": ""}', "sft.jsonl:2: response must be a non-empty string"),
    ('{"prompt": [{"role": "assistant", "content": "x"}], "response": "6"}', "sft.jsonl:2: the last message"),
    ('not json', "sft.jsonl:2: not valid JSON"),
])
def test_bad_sft_data_names_file_and_line_and_leaves_no_run_folder(tmp_path, line, message):
    data = tmp_path / "sft.jsonl"
    data.write_text(json.dumps(ROWS[0]) + "\n" + line + "\n")
    with pytest.raises(TaskError, match=message.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
        train(sft_config(tmp_path, "run"), echo=lambda *_: None)
    assert not (tmp_path / "run").exists()


def test_a_prompt_longer_than_max_length_is_an_error_naming_it(tmp_path):
    rows = [{"prompt": "y" * 100, "response": "ok"}]
    with pytest.raises(TaskError, match=r"sft.jsonl:1: the prompt is \d+ tokens.*within sft.max_length=50"):
        train(sft_config(tmp_path, "run", "sft.max_length=50", rows=rows), echo=lambda *_: None)


def test_sft_without_data_needs_a_task_with_responses(tmp_path):
    (tmp_path / "task.jsonl").write_text(json.dumps({"prompt": "2+2?", "answer": "4"}) + "\n")
    config = load_config(None, ["method=sft", "model=tiny", f"output_dir={tmp_path / 'run'}",
                                f"task.data={tmp_path / 'task.jsonl'}", f"task.eval_data={tmp_path / 'task.jsonl'}"])
    with pytest.raises(TaskError, match="method=sft needs sft.data"):
        train(config, echo=lambda *_: None)


def test_sft_on_the_arithmetic_task_trains_on_verified_worked_answers(tmp_path):
    from aha.rewards import numeric_answer
    from aha.tasks import build_task
    from aha.training.supervised.sft import sft_examples

    config = load_config(None, ["method=sft", "task.name=arithmetic", "task.a_max=20", "task.num_eval=12"])
    task = build_task(config.task)
    rows = sft_examples(config, task)
    assert [r["id"] for r in rows] == [s["id"] for s in task.train]  # training problems only, none held out
    assert all(numeric_answer(r["response"], r) == 1.0 for r in rows)


def test_a_resume_with_a_changed_learning_rate_uses_it(tmp_path):
    train(sft_config(tmp_path, "run", "train.steps=2"), echo=lambda *_: None)
    train(sft_config(tmp_path, "run", "train.lr=2e-3", "train.allow_config_change=true"), echo=lambda *_: None)
    saved = torch.load(tmp_path / "run/checkpoints/step-4/trainer.pt", weights_only=False)["optimizers"]["policy"]
    assert [g["lr"] for g in saved["param_groups"]] == [2e-3]
