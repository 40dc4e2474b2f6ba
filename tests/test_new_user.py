"""What a new user met, tried as a TRL user would: each a fix with its test here (the signals'
are in test_stop_signals.py)."""

import json
from pathlib import Path

import pytest

from aha.config import ConfigError, load_config
from aha.errors import TaskError
from aha.tasks import build_task
from aha.tasks.split import held_out_indices
from aha.training.loop import train


def test_an_error_in_a_command_line_override_names_the_override_not_the_file(tmp_path):
    path = tmp_path / "word.yaml"
    path.write_text("train:\n  steps: 3\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.lr=fast"])
    assert str(err.value).startswith("config key 'train.lr' in the override 'train.lr=fast': ")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.stepz=4"])
    assert str(err.value) == ("unknown config key 'train.stepz' in the override 'train.stepz=4' "
                              "(did you mean train.steps?)")
    path.write_text("train:\n  steps: many\n")  # the file's own mistake still names the file
    with pytest.raises(ConfigError) as err:
        load_config(path, ["train.lr=0.1"])
    assert str(err.value).startswith(f"config key 'train.steps' in {path}: ")


ROOT = Path(__file__).parent.parent
QUIET = lambda *_: None


def pairs_config(tmp_path, *overrides):
    """method: dpo with only dpo.data, as a new user writes it first (8 pairs, the tiny model)."""
    pairs = tmp_path / "pairs.jsonl"
    rows = (ROOT / "data/synthetic/arithmetic/preferences_train.jsonl").read_text().splitlines()[:8]
    pairs.write_text("\n".join(rows) + "\n")
    path = tmp_path / "word.yaml"
    path.write_text(f"method: dpo\nmodel: tiny\noutput_dir: {tmp_path / 'run'}\ndpo:\n  data: pairs.jsonl\n"
                    "train:\n  steps: 2\n  report: false\n")
    return load_config(path, list(overrides))


def test_dpo_on_its_own_pairs_does_not_evaluate_an_unrelated_task_and_says_so(tmp_path):
    config = pairs_config(tmp_path)
    assert config.eval.greedy is False
    lines = []
    train(config, echo=lines.append)
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert not any("eval/accuracy" in r for r in records)
    assert sum("no held-out evaluation" in line for line in lines) == 1
    log = (tmp_path / "run/log.txt").read_text()
    assert "trains on dpo.data" in log and "held-out prompts" not in log
    assert "greedy: false" in (tmp_path / "run/config.yaml").read_text()  # a resume decides alike


def test_dpo_eval_fraction_holds_out_pairs_and_measures_them(tmp_path):
    lines = []
    train(pairs_config(tmp_path, "dpo.eval_fraction=0.25"), echo=lines.append)
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    held = [r for r in records if "pref_eval/accuracy" in r]
    assert [r["step"] for r in held] == [0, 2]  # before and after training
    assert all(r["pref_eval/accuracy"] in (0.0, 0.5, 1.0) for r in held)  # 2 of the 8 pairs held out
    assert not any("no held-out evaluation" in line for line in lines)


def test_naming_a_task_keeps_the_greedy_evaluation(tmp_path):
    assert pairs_config(tmp_path, "task.name=arithmetic").eval.greedy is True
    assert pairs_config(tmp_path, "eval.greedy=true").eval.greedy is True
    assert load_config(None, ["method=rl"]).eval.greedy is True


def test_a_held_out_fraction_of_one_file_is_fixed_disjoint_and_whole():
    train_rows, held = held_out_indices(10, 0.3, "task.eval_fraction")
    assert len(held) == 3 and sorted(train_rows + held) == list(range(10)) and not set(train_rows) & set(held)
    assert held_out_indices(10, 0.3, "k") == (train_rows, held)  # the same rows on every run
    assert held_out_indices(1000, 0.1, "k", seed=1)[1] != held_out_indices(1000, 0.1, "k", seed=0)[1]
    with pytest.raises(TaskError, match=r"task.eval_fraction=0.01 of 10 rows holds out 0"):
        held_out_indices(10, 0.01, "task.eval_fraction")


def test_task_eval_fraction_splits_task_data(tmp_path):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                            for i in range(20)))
    task = build_task(load_config(None, [f"task.data={data}", "task.eval_fraction=0.25"]).task)
    assert (len(task.train), len(task.eval)) == (15, 5)
    assert not {s["id"] for s in task.train} & {s["id"] for s in task.eval}
    streamed = build_task(load_config(None, [f"task.data={data}", "task.eval_fraction=0.25", "task.stream=true"]).task)
    assert [s["id"] for s in streamed.eval] == [s["id"] for s in task.eval]
    with pytest.raises(TaskError, match="task.eval_fraction"):  # neither held-out file nor fraction
        build_task(load_config(None, [f"task.data={data}"]).task)
    with pytest.raises(ConfigError, match="without task.eval_data"):
        load_config(None, [f"task.data={data}", f"task.eval_data={data}", "task.eval_fraction=0.25"])
