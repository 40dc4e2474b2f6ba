"""The reward audit: false-positive / false-negative rates on labelled completions."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aha.cli import main
from aha.config import RewardSpec
from aha.rewards import RewardError, build_reward
from aha.rewards.audit import audit_reward, load_labels

ROOT = Path(__file__).parent.parent
SHIPPED = ROOT / "data" / "audit" / "math_answers.jsonl"


def test_audit_counts_by_hand():
    records = [
        {"completion": "so 12", "reference": "12", "label": True},  # accepted, right
        {"completion": "12.0", "reference": "12", "label": True},  # accepted, right
        {"completion": "twelve", "reference": "12", "label": True},  # rejected: false negative
        {"completion": "so 13", "reference": "12", "label": False},  # rejected, right
        {"completion": "13 no wait 12", "reference": "12", "label": False, "category": "hedge"},  # false positive
    ]
    result = audit_reward(build_reward([RewardSpec(fn="numeric_answer")]), records)
    assert (result.positives, result.negatives) == (3, 2)
    assert [r["completion"] for r in result.false_negatives] == ["twelve"]
    assert [r["completion"] for r in result.false_positives] == ["13 no wait 12"]
    assert result.fn_rate == pytest.approx(1 / 3) and result.fp_rate == pytest.approx(1 / 2)
    assert result.by_category["hedge"] == {"n": 1, "fp": 1, "fn": 0}


def test_a_reward_that_raises_counts_as_rejection():
    records = [{"completion": "x", "reference": "not a number", "label": True}]
    result = audit_reward(build_reward([RewardSpec(fn="numeric_answer")]), records)
    assert result.failed == 1 and len(result.false_negatives) == 1


def test_labels_errors_name_file_and_line(tmp_path):
    path = tmp_path / "labels.jsonl"
    path.write_text('{"completion": "1", "reference": "1", "label": true}\n{"completion": "1", "label": "yes"}\n')
    with pytest.raises(RewardError, match=r"labels.jsonl:2: needs 'completion', 'reference'"):
        load_labels(path)
    path.write_text("{oops\n")
    with pytest.raises(RewardError, match=r"labels.jsonl:1: not valid JSON"):
        load_labels(path)


def test_shipped_math_set_is_reproducible_and_large_enough(tmp_path):
    records = load_labels(SHIPPED)
    assert len(records) >= 300
    assert sum(r["label"] for r in records) >= 150 and sum(not r["label"] for r in records) >= 100
    assert len({r["category"] for r in records}) >= 12
    before = SHIPPED.read_text()
    subprocess.run([sys.executable, str(SHIPPED.with_name("make_math_answers.py"))], check=True, capture_output=True)
    assert SHIPPED.read_text() == before  # the generator is deterministic and the file is its output


def test_math_verifier_beats_the_numeric_baseline_on_the_shipped_set():
    records = load_labels(SHIPPED)
    math = audit_reward(build_reward([RewardSpec(fn="math_answer")]), records)
    numeric = audit_reward(build_reward([RewardSpec(fn="numeric_answer")]), records)
    assert math.fp_rate == 0.0 and math.fn_rate < 0.02
    assert (len(math.false_negatives), len(math.false_positives)) == (2, 0)  # "twelve" and 1.5e3, of 266 and 138
    assert numeric.fp_rate == 0.0 and numeric.fn_rate > 0.5  # fractions, LaTeX, intervals... all missed
    assert {r["category"] for r in math.false_negatives} <= {"words", "scientific"}


def test_cli_audit_reward(tmp_path, capsys):
    config = tmp_path / "audit.yaml"
    config.write_text("model: tiny\nreward: [{fn: math_answer}]\n")
    out = tmp_path / "errors.jsonl"
    assert main(["audit", "reward", str(config), "--labels", str(SHIPPED), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "false-negative rate" in printed and "false-positive rate 0.0%" in printed
    errors = [json.loads(line) for line in out.read_text().splitlines()]
    assert errors and all(e["error"] in ("false_positive", "false_negative") for e in errors)
    assert main(["audit", "reward", str(config), "--labels", str(tmp_path / "missing.jsonl")]) == 2
    assert "labels file not found" in capsys.readouterr().err


def test_the_audit_names_the_reward_as_it_is_combined(tmp_path, capsys):
    config = tmp_path / "audit.yaml"
    config.write_text("model: tiny\nreward: [{fn: math_answer}, {fn: format, weight: 0.2},\n"
                      "  {fn: math_answer, name: gate, combine: gate, gate_min: 0.5}, {fn: format, name: fmt, combine: "
                      "product}]\n")
    assert main(["audit", "reward", str(config), "--labels", str(SHIPPED)]) == 0
    assert "(1*math_answer + 0.2*format) * [gate >= 0.5] * fmt: 404 labelled completions" in capsys.readouterr().out


def test_reward_formula():
    from aha.rewards.compose import reward_formula

    assert reward_formula([("a", 1.0, "sum", 1.0)]) == "1*a"
    assert reward_formula([("a", 1.0, "sum", 1.0), ("b", 0.5, "sum", 1.0)]) == "1*a + 0.5*b"
    assert reward_formula([("a", 2.0, "sum", 1.0), ("g", 1.0, "gate", 1.0)]) == "2*a * [g >= 1]"
    assert reward_formula([("g", 1.0, "gate", 0.5)]) == "0 * [g >= 0.5]"  # nothing summed: the total is 0
