"""The findings' runner and pages (bench/findings/): runs are trained once and kept, a page's
table is the runs' numbers, and the index agrees with every page's verdict and key number."""

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "bench" / "findings"))

from pages import index_text, page_text, read_marker, write_index  # noqa: E402
from runner import Claim, Condition, finished, run_claim, run_folder, summarize  # noqa: E402

TINY = ("model=tiny", "train.steps=1", "eval.limit=4", "rollout.max_new_tokens=4", "eval.max_new_tokens=4",
        "train.report=false", "rollout.prompts_per_step=2", "rollout.group_size=4", "train.checkpoint_every=1")


def test_a_claim_runs_each_seed_once_and_its_page_holds_their_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    claim = Claim("demo-check", "A check of the runner", "none", "the runner keeps what it ran",
                  "configs/quickstart.yaml", [Condition("base", ())], seeds=(0, 1), common=TINY)
    said = []
    run_claim(claim, tmp_path, echo=said.append)
    folders = [run_folder(claim, claim.conditions[0], seed, tmp_path) for seed in (0, 1)]
    assert all(finished(f) for f in folders)
    stamps = [os.stat(f / "metrics.jsonl").st_mtime_ns for f in folders]
    run_claim(claim, tmp_path, echo=said.append)  # finished runs are kept, not run again
    assert [os.stat(f / "metrics.jsonl").st_mtime_ns for f in folders] == stamps and said[-1].endswith("kept")
    summary = summarize(claim, tmp_path)
    last = [[json.loads(x) for x in (f / "metrics.jsonl").read_text().splitlines() if "eval/accuracy" in x][-1]
            for f in folders]
    assert summary.values["base"] == [r["eval/accuracy"] for r in last]
    page = page_text(claim, summary, "not testable here", "a check", "n/a", tmp_path, "this CPU")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/demo-check.md").write_text(page)
    assert read_marker(tmp_path / "docs/demo-check.md") == ("none", "not testable here", "n/a")
    assert f"| base | {summary.values['base'][0]:.3f} | {summary.values['base'][1]:.3f} |" in page
    assert "| [A check of the runner](demo-check.md) | none | not testable here | n/a |" in write_index(
        tmp_path / "docs").read_text()
    with pytest.raises(ValueError, match="verdict 'maybe'"):
        page_text(claim, summary, "maybe", "", "", tmp_path, "this CPU")


def test_the_index_agrees_with_every_page():
    """docs/findings/README.md is what the pages' comments say: rewrite it with write_index."""
    folder = ROOT / "docs" / "findings"
    assert (folder / "README.md").read_text() == index_text(folder)
