"""Synthetic SFT / preference / process-reward data (aha/tasks/synthetic.py, `aha data`):
deterministic, identical to the committed files, right or wrong exactly as labelled, and
never built from a held-out problem."""

import json
from pathlib import Path

import pytest

from aha.cli import main
from aha.config import TaskConfig, load_config
from aha.errors import TaskError
from aha.rewards.verifiers import numeric_answer
from aha.tasks.arithmetic import arithmetic_splits
from aha.tasks.synthetic import SUBSETS, solution, synthetic_files, to_jsonl, write_synthetic

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "data/synthetic/arithmetic"
QUICKSTART = ROOT / "configs/quickstart.yaml"
# every operator, negative numbers, b = 0 and 1 (where some kinds of wrong answer cannot be made)
MIXED = TaskConfig(name="arithmetic", operators=["+", "-", "*"], a_min=-12, a_max=41, b_min=-2, b_max=11, num_eval=120)
KEYS = {"sft": {"id", "prompt", "response", "answer"},
        "preferences": {"id", "prompt", "chosen", "rejected", "answer", "subset"},
        "steps": {"id", "prompt", "steps", "labels", "answer"}}


def _read(folder: Path) -> dict[str, list[dict]]:
    return {p.name: [json.loads(line) for line in p.read_text().splitlines()] for p in sorted(folder.glob("*.jsonl"))}


@pytest.fixture(scope="module")
def committed() -> dict[str, list[dict]]:
    return _read(COMMITTED)


def test_same_inputs_give_the_same_bytes(tmp_path):
    write_synthetic(MIXED, tmp_path / "a", seed=3)
    write_synthetic(MIXED, tmp_path / "b", seed=3)
    write_synthetic(MIXED, tmp_path / "c", seed=4)
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert names == ["preferences_eval.jsonl", "preferences_train.jsonl", "sft_train.jsonl", "steps_eval.jsonl",
                     "steps_train.jsonl"]
    for name in names:
        first = (tmp_path / "a" / name).read_bytes()
        assert first == (tmp_path / "b" / name).read_bytes()
        assert first != (tmp_path / "c" / name).read_bytes()  # the seed matters
        assert first.endswith(b"\n") and b"\r" not in first


def test_committed_files_equal_a_fresh_generation(tmp_path, capsys, committed):
    """The exact command of data/synthetic/arithmetic/README.md: the files cannot drift from the code."""
    assert main(["data", str(QUICKSTART), "--out", str(tmp_path), "--seed", "0"]) == 0
    assert "preferences_train.jsonl: 272 lines" in capsys.readouterr().out
    fresh = sorted(p.name for p in tmp_path.iterdir())
    assert fresh == sorted(committed)
    for name in fresh:
        assert (tmp_path / name).read_bytes() == (COMMITTED / name).read_bytes(), name
    readme = (COMMITTED / "README.md").read_text()
    assert "aha data configs/quickstart.yaml --out data/synthetic/arithmetic --seed 0" in readme
    for name, rows in committed.items():  # the counts the README states
        assert f"| `{name}` | {len(rows)} |" in readme


def _check(files: dict[str, list[dict]]) -> None:
    """Every line right or wrong as its fields say, by the demo's reward."""
    for name, rows in files.items():
        kind = name.split("_")[0]
        for r in rows:
            assert set(r) == KEYS[kind], name
            sample = {"answer": r["answer"]}
            if kind == "sft":
                assert numeric_answer(r["response"], sample) == 1.0, r
            elif kind == "preferences":
                assert numeric_answer(r["chosen"], sample) == 1.0, r
                assert numeric_answer(r["rejected"], sample) == 0.0, r
                assert r["subset"] in SUBSETS
            else:
                labels = r["labels"]
                assert len(labels) == len(r["steps"]) >= 2 and set(labels) <= {0, 1}
                assert labels == sorted(labels, reverse=True), r  # 1...1 0...0: everything after an error is 0
                assert labels[-1] == numeric_answer("\n".join(r["steps"]), sample), r


def test_every_committed_line_is_right_or_wrong_as_labelled(committed):
    _check(committed)
    for name in ("preferences_train.jsonl", "preferences_eval.jsonl"):
        assert {r["subset"] for r in committed[name]} == set(SUBSETS)


def test_every_line_of_a_mixed_task_is_right_or_wrong_as_labelled():
    _check(synthetic_files(MIXED, seed=1))


def test_nothing_held_out_is_in_a_train_file(committed):
    cfg = load_config(QUICKSTART).task
    for files, task in ((committed, cfg), (synthetic_files(MIXED, seed=1), MIXED)):
        train, held_out = arithmetic_splits(task)
        held_prompts = {s["prompt"] for s in held_out}
        for name, rows in files.items():
            prompts = {r["prompt"] for r in rows}
            if name.endswith("_train.jsonl"):
                assert not prompts & held_prompts, name
                assert prompts <= {s["prompt"] for s in train}
            else:
                assert prompts <= held_prompts, name


def test_step_solutions_and_label_convention(committed):
    assert solution(38, "*", 7) == ["38 * 7 = 30 * 7 + 8 * 7", "30 * 7 = 210", "8 * 7 = 56", "210 + 56 = 266"]
    assert solution(7, "*", 8) == ["7 * 8 = 6 * 8 + 8 = 48 + 8", "48 + 8 = 56"]  # single digit: two steps
    rows = committed["steps_train.jsonl"]
    right = [r for r in rows if all(r["labels"])]
    assert 0.35 < len(right) / len(rows) < 0.65  # about half
    first_error = {r["labels"].index(0) for r in rows if not all(r["labels"])}
    assert first_error == {0, 1, 2, 3}  # the wrong step can be anywhere, the split included


def test_length_does_not_separate_chosen_from_rejected(committed):
    for name in ("preferences_train.jsonl", "preferences_eval.jsonl"):
        rows = committed[name]
        shorter = sum(len(r["chosen"]) < len(r["rejected"]) for r in rows) / len(rows)
        longer = sum(len(r["chosen"]) > len(r["rejected"]) for r in rows) / len(rows)
        assert 0.1 < shorter < 0.4 and 0.1 < longer < 0.4, (name, shorter, longer)


def test_cap_takes_a_fixed_prefix():
    full = synthetic_files(MIXED, seed=2)
    capped = synthetic_files(MIXED, seed=2, max_per_file=10)
    for name, rows in capped.items():
        assert len(rows) == 10 and to_jsonl(rows) == to_jsonl(full[name][:10])
    assert len(full["sft_train.jsonl"]) == 400 and len(full["steps_eval.jsonl"]) == 120  # the default caps


def test_bad_config_gives_a_clear_error(tmp_path, capsys):
    with pytest.raises(TaskError, match="built-in arithmetic task"):
        synthetic_files(TaskConfig(data="train.jsonl", eval_data="eval.jsonl"))
    with pytest.raises(TaskError, match="max-per-file"):
        synthetic_files(MIXED, max_per_file=0)
    assert main(["data", "task.a_min=50", "task.a_max=10", "--out", str(tmp_path)]) == 2
    assert "a_min/b_min must not exceed a_max/b_max" in capsys.readouterr().err
    assert main(["data", str(QUICKSTART), "task.num_eval=9999", "--out", str(tmp_path)]) == 2
    assert "num_eval=9999" in capsys.readouterr().err
    assert main(["data", "task.nonsense=1", "--out", str(tmp_path)]) == 2
    assert "unknown config key 'task.nonsense'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written on an error
