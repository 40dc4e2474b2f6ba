"""Named, timed phases: each step's time split by phase in metrics.jsonl, time/step_s written
once by the loop, and the console's summary of them."""

import time
from pathlib import Path

import pytest
from test_training import metrics, tiny_config

from aha.training.loop import train
from aha.training.phases import Phases, phase_summary

SFT_DATA = Path(__file__).parent.parent / "data/synthetic/arithmetic/sft_train.jsonl"


def test_a_phase_entered_twice_counts_both_and_keeps_its_first_place():
    phases = Phases()
    with phases("generate"):
        time.sleep(0.02)
    with phases("update"):
        pass
    with phases("generate"):
        time.sleep(0.02)
    phases.exclude("generate", 0.01)
    phases.exclude("prepare", 5.0)  # a phase the step never entered stays out
    record = phases.record()
    assert list(record) == ["time/generate_s", "time/update_s"]
    assert 0.03 - 1e-3 <= record["time/generate_s"] < 0.2 and 0 <= record["time/update_s"] < 0.05


def test_a_phase_that_raises_is_still_timed():
    phases = Phases()
    with pytest.raises(ValueError), phases("score"):
        raise ValueError("a reward failed")
    assert list(phases.record()) == ["time/score_s"]


def test_the_summary_is_the_mean_of_each_phase_over_the_steps():
    records = [{"step": 0, "eval/accuracy": 0.5},  # a held-out evaluation: not a step
               {"step": 1, "time/generate_s": 3.0, "time/update_s": 2.0, "time/step_s": 5.5, "time/sync_s": 0.5},
               {"step": 2, "time/generate_s": 4.0, "time/step_s": 4.5, "time/sync_s": 0.0}]  # no update this step
    assert phase_summary(records) == "5.00 s a step (generate 3.50, update 1.00, sync 0.25)"
    assert phase_summary([{"step": 0, "eval/accuracy": 0.5}]) == ""


@pytest.mark.parametrize("method, phases", [
    ("rl", ["generate", "score", "prepare", "update"]),
    ("sft", ["update"]),
])
def test_every_step_record_holds_its_phases_and_one_step_time(tmp_path, method, phases):
    sft = ["method=sft", f"sft.data={SFT_DATA}"] if method == "sft" else []
    lines = []
    train(tiny_config(tmp_path, "run", "train.steps=2", *sft), echo=lines.append)
    steps = [r for r in metrics(tmp_path / "run") if "time/step_s" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for record in steps:
        timed = [k.removeprefix("time/").removesuffix("_s") for k in record if k.startswith("time/")]
        assert timed == [*phases, "step", "sync"]
        assert sum(record[f"time/{p}_s"] for p in phases) <= record["time/step_s"]
    assert any(line.startswith("time: ") and "s a step (" in line for line in lines)
