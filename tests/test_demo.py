"""The demo's promise, measured: `pytest -m slow` (about 17 minutes on 2 cores)."""

from pathlib import Path

import pytest

from aha.config import load_config
from aha.training.loop import train


@pytest.mark.slow
def test_quickstart_raises_held_out_accuracy_by_20_points_within_15_minutes(tmp_path):
    config = load_config(Path(__file__).parents[1] / "configs/quickstart.yaml", [f"output_dir={tmp_path / 'run'}"])
    summary = train(config)
    assert summary.accuracy_after - summary.accuracy_before >= 0.20
    assert summary.train_seconds <= 15 * 60
