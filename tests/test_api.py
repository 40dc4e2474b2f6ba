"""aha from Python: train and evaluate in one process, with Python rewards and data in memory,
twice, leaving nothing behind; errors are the CLI's exceptions, never an exit."""

import logging
import os
import random
import re
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

import aha
from aha.config import ConfigError
from aha.rewards.functions import lent
from aha.training.interrupt import TrainingInterrupted

CONFIGS = Path(__file__).parent.parent / "configs"

ROWS = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a in range(2, 8) for b in range(2, 6)]
FAST = dict(model="tiny", train__steps=2, rollout__prompts_per_step=2, rollout__group_size=4,
            rollout__max_new_tokens=4, eval__max_new_tokens=4, train__report=False, task__eval_fraction=0.25)


def ends_in_answer(completion: str, sample: dict) -> float:
    """An importable reward: it keeps its 'module:function' name in config.yaml."""
    return float(completion.strip().endswith(sample["answer"]))


def quiet(*_):
    pass


STOPPED = []


def ctrl_c_once(completion: str, sample: dict) -> float:
    """An importable reward that presses Ctrl-C (SIGINT to this process) on its first call."""
    STOPPED.append(1)
    if len(STOPPED) == 1:
        os.kill(os.getpid(), signal.SIGINT)
    return 0.0


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
    assert lent() == {}  # the lambda is forgotten once the call returns
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
        aha.train(model="tiny", train__lr="fast", data=ROWS, output_dir=str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()  # refused before its rows were written
    with pytest.raises(ConfigError, match="unknown config key 'train.stepz'.*did you mean train.steps"):
        aha.load_config(train__stepz=3)
    with pytest.raises(FileNotFoundError):  # a failed launch: an exception, no exit, no folder left
        aha.train(model="no-such-model-folder", data=ROWS, output_dir=str(tmp_path / "gone"), **{
            k: v for k, v in FAST.items() if k != "model"})
    assert not (tmp_path / "gone").exists() and lent() == {}


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
    assert "reward/Brevity" in namespace["run2"].metrics[-2] and lent() == {}


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


def test_a_config_given_is_read_as_it_was_given_not_as_every_default(tmp_path):
    """A Config (or a run's) given again: only what was set in it counts as set, so what its checks
    derive (a built-in task's reward, eval.greedy switched off, a mixture's rewards) is derived anew."""
    from aha.config import dump_config, load_config

    mixture = aha.load_config(CONFIGS / "mixture.yaml", model="tiny")
    assert aha.load_config(mixture, train__steps=1).train.steps == 1  # not "set on task, not on one task"
    (tmp_path / "config.yaml").write_text(dump_config(mixture))  # a mixture run's config.yaml loads again
    assert load_config(tmp_path / "config.yaml").model_dump() == mixture.model_dump()
    countdown = aha.load_config(model="tiny", task__name="countdown")
    assert [s.fn for s in aha.load_config(countdown, task__name="sorting").reward] == ["aha.rewards:list_answer"]
    assert aha.load_config(aha.load_config(model="tiny"), method="dpo", dpo__data="p.jsonl").eval.greedy is False
    edited = aha.load_config(model="tiny")
    edited.train.steps = 7  # an assignment counts as set
    assert aha.load_config(edited).train.steps == 7 and aha.load_config(edited).model == "tiny"
    with_paths = aha.load_config({"output_dir": tmp_path / "a"}, task__data=tmp_path / "rows.jsonl")
    assert (with_paths.output_dir, with_paths.task.data) == (str(tmp_path / "a"), str(tmp_path / "rows.jsonl"))


def test_an_error_names_the_argument_or_file_that_set_the_key(tmp_path):
    from aha.config import load_config

    (tmp_path / "bad_task.yaml").write_text("model: tiny\ntask:\n  eval_fraction: 0.1\n")
    with pytest.raises(ConfigError, match=f"config key 'task' in {re.escape(str(tmp_path))}/bad_task.yaml"):
        load_config(tmp_path / "bad_task.yaml", ["task.seed=3"])  # a section's check: the override set one key
    with pytest.raises(ConfigError, match="unknown config key 'trian' in the override 'trian.steps=3'"):
        aha.load_config(trian__steps=3)
    with pytest.raises(ConfigError, match=r"'reward.0.weight' in the override \"reward.0='python:reward'\""):
        aha.train(model="tiny", reward={"fn": lambda c, s: 1.0, "weight": "heavy"}, output_dir=str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="config key 'task' in aha.train's arguments"):
        aha.train(model="tiny", task__eval_fraction=0.25, output_dir=str(tmp_path / "t"))
    with pytest.raises(ConfigError, match="method sft has no held-out data of its own.*task__eval_data"):
        aha.train(method="sft", model="tiny", data=[{"prompt": "1+1?", "response": "2"}], eval_data=ROWS,
                  output_dir=str(tmp_path / "s"))
    for rows, message in [([("prompt", "answer")], "row 0 is a tuple"), ({"prompt": ["a"]}, "is of type dict"),
                          ([{"prompt": "p", "answer": {1}}], "row 0: set .* is not a JSON value")]:
        with pytest.raises(ConfigError, match=message):
            aha.train(model="tiny", data=rows, output_dir=str(tmp_path / "d"))
    with pytest.raises(aha.rewards.RewardError, match=r"reward\[0\].model: .*no-rm' is not a folder"):
        aha.train(reward={"model": str(tmp_path / "no-rm")}, data=ROWS, output_dir=str(tmp_path / "m"), **FAST)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad_task.yaml"]


def test_rows_replace_a_built_in_task_and_evaluate_writes_nothing(tmp_path):
    import pandas

    frame = pandas.DataFrame([{**row, "answer": np.int64(row["answer"])} for row in ROWS])  # NumPy numbers too
    logger, level = logging.getLogger("aha"), logging.getLogger("aha").level
    logger.setLevel(logging.WARNING)
    try:
        run = aha.train(CONFIGS / "quickstart.yaml", data=frame, output_dir=tmp_path / "q", echo=quiet,
                        **{**FAST, "train__steps": 1, "eval__before": False})
        assert logger.level == logging.WARNING  # the run's log.txt set it to INFO for the call
    finally:
        logger.setLevel(level)
    assert run.config.task.name is None and run.config.task.data.startswith(str(tmp_path / "q/data"))
    found = aha.evaluate(CONFIGS / "quickstart.yaml", data=ROWS[:2], model="tiny", output_dir=str(tmp_path / "e"),
                         eval__max_new_tokens=4)
    assert found.result.n == 2 and not (tmp_path / "e").exists()


def test_evaluate_refuses_a_run_that_measures_no_greedy_accuracy(tmp_path):
    (tmp_path / "pairs.jsonl").write_text('{"prompt": "1+1?", "chosen": "2", "rejected": "3"}\n')
    dpo = aha.load_config(model="tiny", method="dpo", dpo__data=str(tmp_path / "pairs.jsonl"))
    with pytest.raises(ConfigError, match="measures no greedy accuracy .*Run.held_out.*data="):
        aha.evaluate(dpo)
    with pytest.raises(ConfigError, match="method: rm run trains a reward model.*Run.held_out"):
        aha.evaluate(aha.load_config(dpo, method="rm", rm__data=str(tmp_path / "pairs.jsonl")), data=ROWS)
    assert aha.evaluate(dpo, data=ROWS[:1], eval__max_new_tokens=2).result.n == 1  # rows given: greedy on them


def test_an_interrupted_run_says_how_to_resume_naming_what_exists(tmp_path):
    settings = {**FAST, "eval__before": False, "eval__after": False, "output_dir": str(tmp_path / "byname")}
    (tmp_path / "mine.yaml").write_text("model: tiny\nseed: 3\n")
    STOPPED.clear()
    with pytest.raises(TrainingInterrupted, match="Continue with: aha train ") as stop:
        aha.train(tmp_path / "mine.yaml", reward=ctrl_c_once, data=ROWS, echo=quiet, **settings)
    path = re.search(r"Continue with: aha train (\S+) train.resume=true", str(stop.value)).group(1)
    assert path == str(tmp_path / "byname/config.yaml")  # the run's own, which holds the keywords too
    run = aha.train(path, train__resume=True, echo=quiet)
    assert [r["step"] for r in run.metrics if "reward/mean" in r] == [1, 2]
    calls = []

    def ctrl_c(completion, sample):  # a Python reward: the same call resumes it
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return 0.0

    settings["output_dir"] = str(tmp_path / "lent")
    with pytest.raises(TrainingInterrupted, match=r"the same aha.train\(...\) call with train__resume=True .*python:"
                                                  "ctrl_c"):
        aha.train(reward=ctrl_c, data=ROWS, echo=quiet, **settings)
    run = aha.train(reward=ctrl_c, data=ROWS, echo=quiet, train__resume=True, **settings)
    assert [r["step"] for r in run.metrics if "reward/mean" in r] == [1, 2]


def test_interrupted_learner_ranks_say_how_to_resume(tmp_path, monkeypatch):
    import aha.cli.learners

    launched = []

    def ranks_stopped(config, argv, env, own_session):  # as launch_ranks after it passed Ctrl-C on
        launched.append(Path(argv[1]).read_text())
        if len(launched) == 2:  # the run began: rank 0 wrote its config.yaml
            (Path(config.output_dir) / "config.yaml").write_text(launched[-1])
        return 130

    monkeypatch.setattr(aha.cli.learners, "train_on_ranks", ranks_stopped)
    settings = {**FAST, "distributed__processes": 2, "output_dir": str(tmp_path / "ranks")}
    with pytest.raises(TrainingInterrupted, match="stopped by SIGINT before the run began"):
        aha.train(reward=ends_in_answer, data=ROWS, **settings)
    assert not (tmp_path / "ranks").exists()
    with pytest.raises(TrainingInterrupted, match="Continue with: aha train (\\S+) train.resume=true") as stop:
        aha.train(reward=ends_in_answer, data=ROWS, **settings)
    assert stop.value.code == 130 and "test_api:ends_in_answer" in launched[-1]
    assert (tmp_path / "ranks/data/launch-config.yaml").exists()  # what the ranks' own hint names


def test_a_call_within_a_call_names_its_python_rewards_alike_and_apart(tmp_path):
    """python:<name> is the call's own: the inner call's lambda is python:reward as it would be alone,
    so the same call resumes it; two lambdas of one call are reward and reward_2."""
    settings = {**FAST, "train__steps": 1, "eval__before": False, "eval__after": False}
    inner = str(tmp_path / "inner")

    def trains_once(completion, sample):
        if not (tmp_path / "inner").exists():
            aha.train(reward=lambda c, s: 0.0, data=ROWS, output_dir=inner, echo=quiet, **settings)
        return 1.0

    outer = aha.train(reward=[trains_once, lambda c, s: 0.5, lambda c, s: 0.25], data=ROWS, echo=quiet,
                      output_dir=str(tmp_path / "outer"), **settings)
    record = [r for r in outer.metrics if "reward/mean" in r][-1]
    assert (record["reward/reward"], record["reward/reward_2"]) == (0.5, 0.25)
    assert "fn: python:reward\n" in (tmp_path / "inner/config.yaml").read_text()
    resumed = aha.train(reward=lambda c, s: 0.0, data=ROWS, output_dir=inner, echo=quiet, train__resume=True,
                        **{**settings, "train__steps": 2})
    assert [r["step"] for r in resumed.metrics if "reward/mean" in r] == [1, 2] and lent() == {}


def test_a_missing_dependency_of_a_subpackage_surfaces(monkeypatch):
    import importlib

    def missing(name):
        raise ModuleNotFoundError("No module named 'somedep'", name="somedep")

    assert {"train", "evaluate", "load_config", "Run", "Config"} <= set(dir(aha))
    with pytest.raises(AttributeError, match="has no attribute 'nothing_here'"):
        aha.nothing_here  # noqa: B018
    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(ModuleNotFoundError, match="somedep"):
        aha.envs_of_another_kind  # noqa: B018
