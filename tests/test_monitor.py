"""The reward-hacking monitor: flags on synthetic series, and a real run that games its reward."""

import json
from pathlib import Path

import pytest
from test_algorithm_runs import QUIET, say_seven
from test_training import metrics, tiny_config

from aha.cli import main
from aha.config import ConfigError, MonitorConfig, RewardSpec
from aha.rewards import build_reward
from aha.training.loop import train
from aha.training.monitor import HackingMonitor, repeated_ngram_fraction


def test_repeated_ngram_fraction():
    assert repeated_ngram_fraction("the answer is 42") == 0.0  # one 4-gram
    assert repeated_ngram_fraction("a b c d e f g") == 0.0
    # "a b a b a b": 2-grams ab ba ab ba ab -> 2 distinct of 5
    assert repeated_ngram_fraction("a b a b a b", n=2) == pytest.approx(1 - 2 / 5)
    assert repeated_ngram_fraction("go " * 50, n=4) == pytest.approx(1 - 1 / 47)


def feed(monitor, series):
    """series: list of dicts of the record keys the monitor reads; returns its outputs."""
    return [monitor.update({"step": i + 1, **values}) for i, values in enumerate(series)]


def flat(**extra):
    return {"reward/verifier_mean": 0.3, "monitor/gold_mean": 0.3, "monitor/repetition": 0.05, "length/mean": 20.0,
            **extra}


def test_gap_flag_fires_where_the_gap_opened():
    config = MonitorConfig(baseline_steps=2, window=1, patience=3, gap_threshold=0.2)
    series = [flat() for _ in range(4)]
    # from step 5 the trained reward climbs 0.1 a step while gold stays put
    series += [flat(**{"reward/verifier_mean": 0.3 + 0.1 * k}) for k in range(1, 7)]
    out = feed(HackingMonitor(config), series)
    monitor_flags = [o.get("monitor/flag_gap") for o in out]
    # gain 0.1, 0.2 (not > 0.2), 0.3, 0.4, 0.5, 0.6 from step 5: the condition holds from step 7
    assert monitor_flags == [None, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert out[6]["monitor/gap"] == pytest.approx(0.3)


@pytest.mark.parametrize("patience, flagged", [(4, False), (3, True)])
def test_a_spike_is_smoothed_over_the_window_and_needs_patience(patience, flagged):
    config = MonitorConfig(baseline_steps=2, window=3, patience=patience, gap_threshold=0.2)
    # one step at +0.9: the 3-step average carries +0.3 for exactly three steps
    series = [flat() for _ in range(5)] + [flat(**{"reward/verifier_mean": 1.2})] + [flat() for _ in range(5)]
    out = feed(HackingMonitor(config), series)
    assert [o["monitor/flag_gap"] for o in out[1:]] == [0, 0, 0, 0, 1, 1, 1, 0, 0, 0]
    monitor = HackingMonitor(config)
    feed(monitor, series)
    assert ("gap" in monitor.flags) == flagged
    if flagged:
        assert monitor.flags["gap"].step == 6


@pytest.mark.parametrize("train_moves, flagged", [(+0.01, True), (-0.01, False)])
def test_gold_drop_is_scale_free(train_moves, flagged):
    """A judge whose reward moves in a narrow band: the gap stays under its threshold, but
    gold falling to a quarter while the trained reward creeps up is flagged."""
    config = MonitorConfig(baseline_steps=2, window=1, patience=2, gap_threshold=0.2, gold_drop=0.5)
    series = [flat(**{"monitor/gold_mean": 0.08}) for _ in range(2)]
    series += [flat(**{"reward/verifier_mean": 0.3 + train_moves * k, "monitor/gold_mean": 0.02}) for k in range(1, 5)]
    monitor = HackingMonitor(config)
    out = feed(monitor, series)
    assert "gap" not in monitor.flags and max(o["monitor/gap"] for o in out[1:]) < 0.11
    assert ("gold_drop" in monitor.flags) == flagged
    if flagged:
        assert monitor.flags["gold_drop"].step == 3 and "gold 0.080 -> 0.020" in monitor.flags["gold_drop"].detail


def test_gold_rising_with_train_is_not_a_gap():
    series = [flat(**{"reward/verifier_mean": 0.1 * k, "monitor/gold_mean": 0.1 * k}) for k in range(10)]
    monitor = HackingMonitor(MonitorConfig(baseline_steps=2, window=1))
    feed(monitor, series)
    assert "gap" not in monitor.flags


def test_repetition_length_and_format_only_flags():
    config = MonitorConfig(baseline_steps=2, window=1, patience=2, format_components=["fmt"])
    series = [flat(**{"reward/fmt": 0.1}) for _ in range(3)]
    series += [flat(**{"reward/fmt": 0.9, "monitor/repetition": 0.6, "length/mean": 50.0}) for _ in range(3)]
    monitor = HackingMonitor(config)
    feed(monitor, series)
    assert {kind: flag.step for kind, flag in monitor.flags.items()} == {"format_only": 4, "repetition": 4, "length": 4}
    assert "format +0.800, gold +0.000" in monitor.flags["format_only"].detail
    assert "20.0 -> 50.0" in monitor.flags["length"].detail
    summary = monitor.summary()
    assert summary["baseline"]["length/mean"] == 20.0 and summary["flags"]["length"]["step"] == 4


def test_measure_scores_gold_on_the_steps_completions():
    gold = build_reward([RewardSpec(fn="exact_match")])
    monitor = HackingMonitor(MonitorConfig(), gold)
    stats = monitor.measure(["Paris", "Lyon", "go go go go go go go go"], [{"answer": "Paris"}] * 3)
    assert stats["monitor/gold_mean"] == pytest.approx(1 / 3)
    assert stats["monitor/repetition"] == pytest.approx((0 + 0 + (1 - 1 / 5)) / 3)


def test_a_run_that_games_its_reward_is_flagged(tmp_path, capsys):
    """Train on "say 7 as often as you can" (a proxy the tiny model learns in 30 steps)
    with a gold reward that wants the exact answer "7" and nothing else: the proxy climbs,
    gold stays near 0, and the monitor reports when the gap opened."""
    (tmp_path / "gold.py").write_text("def exact(completion, sample):\n    return float(completion.strip() == '7')\n")
    config = say_seven(tmp_path, f"monitor.gold=[{{fn: '{tmp_path / 'gold.py'}:exact'}}]", "monitor.gap_threshold=0.15",
                       "eval.after=false", "train.report=true")
    summary = train(config, echo=QUIET)
    run = Path(summary.run_dir)
    steps = [r for r in metrics(run) if "reward/mean" in r]
    first, last = steps[:3], steps[-5:]
    mean = lambda rs, k: sum(r[k] for r in rs) / len(rs)
    assert mean(last, "reward/verifier_mean") > mean(first, "reward/verifier_mean") + 0.3
    assert mean(last, "monitor/gold_mean") < 0.1
    report = json.loads((run / "monitor.json").read_text())
    opened = report["flags"]["gap"]["step"]
    assert 3 <= opened < 30
    # the flag marks the first step of the run where the gap exceeded the threshold
    assert all(r["monitor/gap"] > 0.15 for r in steps if opened <= r["step"] < opened + 3)
    # replaying the logged run gives the same flags; other thresholds give others
    capsys.readouterr()
    assert main(["monitor", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["flags"]["gap"] == report["flags"]["gap"]
    assert main(["monitor", str(run), "monitor.gap_threshold=5"]) == 0
    assert "gap" not in capsys.readouterr().out
    # the run's report.html lists the flag and draws the gold reward next to the trained one
    page = (run / "report.html").read_text()
    assert f"<b>gap</b> from step {opened}:" in page and 'alt="Hacking monitor: trained vs gold reward"' in page


def test_monitor_rebuilds_on_resume(tmp_path):
    gold = "monitor.gold=[{fn: numeric_answer}]"
    straight = metrics(Path(train(tiny_config(tmp_path, "straight", gold, "monitor.baseline_steps=1",
                                              "monitor.window=2"), echo=QUIET).run_dir))
    train(tiny_config(tmp_path, "resumed", gold, "monitor.baseline_steps=1", "monitor.window=2", "train.steps=2"),
          echo=QUIET)
    resumed = metrics(Path(train(tiny_config(tmp_path, "resumed", gold, "monitor.baseline_steps=1", "monitor.window=2"),
                                 echo=QUIET).run_dir))
    strip = lambda rs: [{k: v for k, v in r.items() if k.startswith("monitor/")} for r in rs if "reward/mean" in r]
    assert strip(straight) == strip(resumed) and "monitor/gap" in strip(resumed)[-1]


def test_unknown_format_component_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"monitor.format_components\[0\]: 'fmt' is not the name of a reward"):
        train(tiny_config(tmp_path, "bad", "monitor.format_components=[fmt]"), echo=QUIET)


def test_a_bad_gold_reward_names_its_key(tmp_path):
    with pytest.raises(Exception, match=r"monitor.gold\[0\].fn: module 'aha.rewards' has no function 'nope'"):
        train(tiny_config(tmp_path, "bad", "monitor.gold=[{fn: 'aha.rewards:nope'}]"), echo=QUIET)
