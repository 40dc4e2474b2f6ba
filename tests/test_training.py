"""The RL loop end to end on the tiny model: run folder, learning, resume, bad input."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aha.cli import main
from aha.config import ConfigError, load_config
from aha.training.loop import train

TINY = """
model: tiny
output_dir: {out}
task: {{name: arithmetic, a_max: 20, num_eval: 12}}
rollout: {{prompts_per_step: 3, group_size: 4, max_new_tokens: 6}}
train: {{steps: 4, lr: 1.0e-3, checkpoint_every: 2, keep_checkpoints: 5, micro_batch_size: 4, report: false}}
algorithm: {{dynamic_sampling: false}}
reward:
  - fn: numeric_answer
  - fn: format
    weight: 0.5
eval: {{limit: 6}}
"""


def tiny_config(tmp_path, name="run", *overrides):
    path = tmp_path / f"{name}.yaml"
    path.write_text(TINY.format(out=tmp_path / name))
    return load_config(path, list(overrides))


def config_with_data(tmp_path, template: str, name: str, overrides, data_file: str, rows: list[dict]):
    """A config from template ({out}, {data}) for run `name`; rows go once to tmp_path/data_file
    as JSONL, shared by every run of the test."""
    data = tmp_path / data_file
    if not data.exists():
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / f"{name}.yaml"
    path.write_text(template.format(out=tmp_path / name, data=data))
    return load_config(path, list(overrides))


def metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def assert_resumes_exactly(tmp_path: Path, make_config, *overrides, weights=("model",)) -> None:
    """A run of 4 steps stopped after step 2 and resumed ends with the same weights (each
    file in `weights`) and the same metrics, timings aside, as one run straight through.
    make_config(tmp_path, run_name, *overrides) -> Config."""
    train(make_config(tmp_path, "straight", *overrides, "train.steps=4"), echo=lambda *_: None)
    train(make_config(tmp_path, "resumed", *overrides, "train.steps=2"), echo=lambda *_: None)
    train(make_config(tmp_path, "resumed", *overrides, "train.steps=4", "train.allow_config_change=true"),
          echo=lambda *_: None)
    for name in weights:
        a = load_file(tmp_path / f"straight/checkpoints/step-4/{name}.safetensors")
        b = load_file(tmp_path / f"resumed/checkpoints/step-4/{name}.safetensors")
        assert all(torch.equal(a[k], b[k]) for k in a)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs]
    assert strip(metrics(tmp_path / "straight")) == strip(metrics(tmp_path / "resumed"))


def test_end_to_end_run_folder(tmp_path):
    summary = train(tiny_config(tmp_path, "run", "train.report=true"), echo=lambda *_: None)
    run = Path(summary.run_dir)
    assert (run / "config.yaml").read_text().startswith("method: rl\nmodel: tiny")
    records = metrics(run)
    steps = [r for r in records if "reward/mean" in r]
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    for key in ("reward/numeric_answer", "reward/format", "loss/policy", "grad_norm", "length/mean", "kl/old"):
        assert key in steps[0]
    assert [r["step"] for r in records if "eval/accuracy" in r] == [0, 4]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert {"prompt", "completion", "reward",
            "numeric_answer"} <= set(next(s for s in samples if s["split"] == "train"))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-2", "step-4"]
    assert {"model.safetensors", "trainer.pt", "state.json",
            "config.json"} <= {p.name for p in (run / "checkpoints/step-4").iterdir()}
    assert not list((run / "checkpoints").glob(".*tmp"))
    page = (run / "report.html").read_text()
    assert "Training run run" in page and 'alt="Reward (mean and components)"' in page


def test_resume_continues_exactly(tmp_path):
    straight = train(tiny_config(tmp_path, "straight"), echo=lambda *_: None)
    train(tiny_config(tmp_path, "resumed", "train.steps=2"), echo=lambda *_: None)
    with open(tmp_path / "resumed/metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward/me')  # killed mid-write: the torn line is dropped on resume
    resumed = train(tiny_config(tmp_path, "resumed"), echo=lambda *_: None)
    a = load_file(Path(straight.run_dir) / "checkpoints/step-4/model.safetensors")
    b = load_file(Path(resumed.run_dir) / "checkpoints/step-4/model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs if "reward/mean" in r]
    # same steps, each logged once, with the same numbers
    assert strip(metrics(Path(straight.run_dir))) == strip(metrics(Path(resumed.run_dir)))


def test_refuses_to_overwrite_a_run_without_resume(tmp_path):
    train(tiny_config(tmp_path, "run", "train.steps=1"), echo=lambda *_: None)
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match="already holds a run"):
        train(tiny_config(tmp_path, "run", "train.resume=false"), echo=lambda *_: None)
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before


def test_kl_to_reference_is_logged_and_grows_from_zero(tmp_path):
    summary = train(tiny_config(tmp_path, "kl", "algorithm.kl_coef=0.1", "eval.before=false", "eval.after=false"),
                    echo=lambda *_: None)
    kls = [r["kl/ref"] for r in metrics(Path(summary.run_dir))]
    assert kls[0] == pytest.approx(0.0, abs=1e-6)  # first step: policy == reference
    assert kls[-1] > 1e-6


def test_custom_jsonl_task_with_custom_reward_learns(tmp_path):
    with open(tmp_path / "train.jsonl", "w") as f:
        for i in range(40):
            f.write(json.dumps({"prompt": f"say {i}", "answer": "7", "level": i % 3}) + "\n")
    (tmp_path / "test.jsonl").write_text('{"prompt": "tell 1", "answer": "7"}\n')
    (tmp_path / "my_rewards.py").write_text(
        "def exact(completion, sample):\n"
        "    assert 'level' in sample  # extra JSONL fields reach the reward\n"
        "    return {'hits': completion.count(sample['answer']) / max(len(completion), 1)}\n"
    )
    (tmp_path / "custom.yaml").write_text(
        "model: tiny\noutput_dir: runs/custom\n"
        "train: {steps: 30, lr: 3.0e-3, checkpoint_every: 0}\n"
        "rollout: {prompts_per_step: 4, group_size: 8, max_new_tokens: 6}\n"
        "task: {data: train.jsonl, eval_data: test.jsonl}\n"
        "reward:\n  - fn: my_rewards:exact\n    weight: 1.0\n"
        "eval: {before: false, after: false}\n"
    )
    config = load_config(tmp_path / "custom.yaml", [f"output_dir={tmp_path / 'runs/custom'}"])
    summary = train(config, echo=lambda *_: None)
    hits = [r["reward/exact/hits"] for r in metrics(Path(summary.run_dir))]
    assert sum(hits[:3]) / 3 < 0.1  # a random model rarely says "7"
    assert sum(hits[-5:]) / 5 > 0.5  # GRPO taught it to


def test_cli_errors_name_the_key_and_exit_2(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("model: tiny\ntrain: {stepz: 3}\n")
    assert main(["train", str(path)]) == 2
    assert "unknown config key 'train.stepz'" in capsys.readouterr().err
    path.write_text(f"model: tiny\noutput_dir: {tmp_path / 'r'}\nreward: [{{fn: 'nowhere:fn'}}]\n")
    assert main(["train", str(path)]) == 2
    assert "reward[0].fn: cannot import 'nowhere'" in capsys.readouterr().err
    # the reward is not used
    assert main(["eval", str(path), "model=/no/such/folder", "eval.scorer=numeric_answer"]) == 2
    assert "neither a built-in name" in capsys.readouterr().err


def test_cli_eval_on_a_checkpoint(tmp_path, capsys):
    summary = train(tiny_config(tmp_path, "run", "train.steps=2"), echo=lambda *_: None)
    out = tmp_path / "eval.jsonl"
    code = main(["eval", str(tmp_path / "run.yaml"), "--checkpoint", f"{summary.run_dir}/checkpoints/step-2",
                 "--output", str(out)])
    assert code == 0
    assert "held-out greedy accuracy" in capsys.readouterr().out
    assert len(out.read_text().splitlines()) == 6


def test_truncated_completions_get_the_truncated_reward(tmp_path):
    (tmp_path / "const.py").write_text("def one(completion, sample):\n    return 1.0\n")
    config = tiny_config(tmp_path, "trunc", "algorithm.truncated_reward=-1.0", "rollout.max_new_tokens=3",
                         f"reward=[{{fn: '{tmp_path / 'const.py'}:one'}}]", "eval.before=false", "eval.after=false")
    summary = train(config, echo=lambda *_: None)
    for r in metrics(Path(summary.run_dir)):
        assert 0 < r["length/truncated_frac"]
        assert r["reward/mean"] == pytest.approx(1.0 - 2.0 * r["length/truncated_frac"], abs=1e-6)
