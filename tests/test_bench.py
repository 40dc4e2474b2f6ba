"""`aha bench` on the tiny model: both trainers run the same setting in their own processes,
the table and the JSON hold each pair's numbers, and the ratio is computed from them."""

import json

import pytest
from test_training import TINY

from aha.cli import main
from aha.perf.bench import RunTimes, phase_rates


def test_phase_rates_count_tokens_and_flops_from_the_logged_times():
    # step 2 (the first is warm-up): 64 samples x 10 tokens in 2 s, update 4 s, sync 1 s
    run = RunTimes("aha", [9.0, 7.0], [0.0, 0.1], [12.0, 10.0], 1.0, 20.0, [3.0, 2.0], [0.0, 1.0])
    rates = phase_rates(run, samples_per_step=64, prompts_per_step=8, prompt_tokens=30.0, params=1000, peak_gflops=1e-3)
    assert rates["generate_tokens_per_s"] == 640 / 2
    assert rates["update_tokens_per_s"] == (640 + 8 * 30) / 4
    assert rates["generate_peak_share"] == pytest.approx(2 * 1000 * (640 + 240) / 2 / 1e9 / 1e-3)
    assert rates["update_peak_share"] == pytest.approx(6 * 1000 * 880 / 4 / 1e9 / 1e-3)
    assert rates["sync_s"] == 1.0


def test_bench_times_aha_and_trl_on_the_same_setting(tmp_path, capsys):
    pytest.importorskip("trl", reason="TRL is not installed (pip install -e '.[bench]')")
    folder = tmp_path / "model"
    from aha.models import load

    tiny = load("tiny")
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY.format(out=tmp_path / "unused").replace("model: tiny", f"model: {folder}"))
    out = tmp_path / "bench.json"
    assert main(["bench", str(config), "train.dtype=float32", "--steps", "2", "--pairs", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    run = result["runs"][0]
    assert len(run["aha"]["step_s"]) == 2 and len(run["trl"]["step_s"]) == 2
    assert all(s > 0 for s in run["aha"]["step_s"] + run["trl"]["step_s"])
    assert run["aha"]["peak_rss_gb"] > 0.1 and run["trl"]["peak_rss_gb"] > 0.1
    ratio = run["trl"]["step_s"][1] / run["aha"]["step_s"][1]
    assert result["speedup"]["median"] == pytest.approx(ratio)
    printed = capsys.readouterr().out
    assert "| 1 | aha |" in printed and "| 1 | TRL |" in printed and "faster than TRL per step" in printed


def test_bench_needs_two_steps(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "configs/quickstart.yaml", "--steps", "1"])
    assert "--steps must be at least 2" in capsys.readouterr().err


def test_trl_gets_aha_micro_batches_and_settings_it_cannot_match_are_refused(capsys):
    from aha.config import load_config
    from aha.perf.trl_grpo import micro_batch, unmatched

    assert micro_batch(64, 16) == 16 and micro_batch(24, 16) == 12 and micro_batch(7, 4) == 1
    assert unmatched(load_config("configs/quickstart.yaml", [])) == []
    refused = unmatched(load_config("configs/quickstart.yaml", ["algorithm.kl_coef=0.1",
                                                                "algorithm.loss_agg=constant"]))
    assert any(r.startswith("algorithm.kl_coef=0.1") for r in refused)
    assert any("loss_agg='constant'" in r for r in refused)
    assert main(["bench", "configs/quickstart.yaml", "algorithm.epochs=2"]) == 2
    assert "TRL's side would not reproduce algorithm.epochs=2" in capsys.readouterr().err
