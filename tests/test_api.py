"""aha from Python: train and evaluate in one process, with Python rewards and data in memory,
twice, leaving nothing behind; errors are the CLI's exceptions, never an exit."""

import random
import signal

import numpy as np
import pytest
import torch

import aha
from aha.config import ConfigError
from aha.rewards.functions import in_process

ROWS = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(2, 8) for b in range(2, 6)]
FAST = dict(model="tiny", train__steps=2, rollout__prompts_per_step=2, rollout__group_size=4,
            rollout__max_new_tokens=4, eval__max_new_tokens=4, train__report=False, task__eval_fraction=0.25)


def ends_in_answer(completion: str, sample: dict) -> float:
    """An importable reward: it keeps its 'module:function' name in config.yaml."""
    return float(completion.strip().endswith(sample["answer"]))


def without_times(records):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in records]


def test_two_runs_in_one_process_with_a_lambda_and_rows_are_identical_and_leave_nothing(tmp_path):
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state().clone(),
              signal.getsignal(signal.SIGTERM))
    runs = [aha.train(reward=lambda completion, sample: float(sample["answer"] in completion), data=ROWS,
                      output_dir=str(tmp_path / name), echo=lambda *_: None, **FAST) for name in ("a", "b")]
    assert without_times(runs[0].metrics) == without_times(runs[1].metrics)  # nothing carried from run a to b
    steps = [r["step"] for r in runs[0].metrics if "reward/mean" in r]
    assert steps == [1, 2] and "reward/reward" in runs[0].metrics[-2]  # a lambda is named "reward"
    assert [p.name for p in runs[0].checkpoints] == ["step-2"]
    assert {r["step"] for r in runs[0].held_out} == {0, 2} and runs[0].accuracy_after is not None
    assert list(runs[0].metrics_frame()["step"])[:1] == [0]
    assert in_process == {}  # the lambda is forgotten once the call returns
    after = (random.getstate(), np.random.get_state()[1], torch.get_rng_state(), signal.getsignal(signal.SIGTERM))
    assert after[0] == before[0] and (after[1] == before[1]).all() and torch.equal(after[2], before[2])
    assert after[3] == before[3]
    # the held-out rows were written into the run folder, so the run can be read (and resumed) later
    assert (tmp_path / "a/data").is_dir() and "python:reward" in (tmp_path / "a/config.yaml").read_text()
    # evaluate the run's newest checkpoint on its own held-out rows: the accuracy training reported
    found = aha.evaluate(runs[0])
    assert found.result.accuracy == runs[0].accuracy_after and found.result.n == len(ROWS) // 4


def test_rewards_as_functions_classes_and_objects(tmp_path):
    class Length:
        def __call__(self, completion, sample):
            return -len(completion) / 100

    lines = []
    run = aha.train(reward=[ends_in_answer, Length, {"fn": lambda c, s: 0.5, "name": "half", "workers": 2}],
                    data=ROWS, output_dir=str(tmp_path / "r"), echo=lines.append, eval__before=False, **FAST)
    record = [r for r in run.metrics if "reward/mean" in r][-1]
    assert {"reward/ends_in_answer", "reward/Length", "reward/half"} <= set(record)
    assert record["reward/half"] == 0.5
    assert "fn: test_api:ends_in_answer" in (tmp_path / "r/config.yaml").read_text()
    assert any("'half' has no importable name" in line and "not in 2 worker processes" in line for line in lines)


def test_a_datasets_dataset_and_sections_as_dicts(tmp_path):
    from datasets import Dataset

    settings = {**FAST, "train": {"steps": 1}}
    settings.pop("train__steps")
    run = aha.train(data=Dataset.from_list(ROWS), output_dir=str(tmp_path / "d"), echo=lambda *_: None,
                    **settings)
    assert run.config.train.steps == 1 and run.config.train.report is False  # merged into the section


def test_errors_are_the_clis_exceptions_and_nothing_is_left_behind(tmp_path):
    with pytest.raises(ConfigError, match="config key 'train.lr' in the override \"train.lr='fast'\""):
        aha.train(model="tiny", train__lr="fast", output_dir=str(tmp_path / "bad"))
    with pytest.raises(ConfigError, match="unknown config key 'train.stepz'.*did you mean train.steps"):
        aha.load_config(train__stepz=3)
    with pytest.raises(FileNotFoundError):  # a failed launch: an exception, no exit, no folder left
        aha.train(model="no-such-model-folder", data=ROWS, output_dir=str(tmp_path / "gone"), **{
            k: v for k, v in FAST.items() if k != "model"})
    assert not (tmp_path / "gone").exists() and in_process == {}


def test_docs_python_md_runs_as_written(tmp_path, monkeypatch):
    """Every python block of docs/python.md, in order, in one namespace, in an empty folder."""
    import re
    from pathlib import Path

    page = (Path(__file__).parent.parent / "docs/python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/python.md", "exec"), namespace)
    assert namespace["run"].steps == 3 and (tmp_path / "runs/from_python/checkpoints/step-3").is_dir()
    assert "reward/Brevity" in namespace["run2"].metrics[-2] and in_process == {}


def test_several_learner_ranks_from_python(tmp_path):
    """distributed.processes=2 starts torchrun as `aha train` does; a lambda cannot go there."""
    settings = {**FAST, "train__steps": 1, "eval__before": False, "distributed__processes": 2}
    with pytest.raises(ConfigError, match="python:reward exist only in this one"):
        aha.train(reward=lambda c, s: 1.0, data=ROWS, output_dir=str(tmp_path / "no"), **settings)
    assert not (tmp_path / "no").exists()
    run = aha.train(reward=ends_in_answer, data=ROWS, output_dir=str(tmp_path / "two"), **settings)
    assert [r["step"] for r in run.metrics if "reward/mean" in r] == [1] and run.accuracy_after is not None
    assert [p.name for p in run.checkpoints] == ["step-1"]


def test_a_run_forecast_over_the_machines_memory_is_refused_from_python_too(tmp_path):
    with pytest.raises(ConfigError, match="forecast peak memory.*rollout.group_size"):
        aha.train(data=ROWS, output_dir=str(tmp_path / "huge"), **{**FAST, "rollout__group_size": 100000,
                                                                    "model": "smollm2-135m"})
    assert not (tmp_path / "huge").exists()
