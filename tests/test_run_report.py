"""`aha report RUN`: the training run's report.html, from the run folder alone."""

import json
from pathlib import Path

import pytest
from test_algorithm_runs import say_seven

from aha.cli import main
from aha.tracking.plots import PANELS, Panel, line_label, same_lines, series, trailing_mean
from aha.training.loop import train

QUIET = lambda *_: None


def test_panel_selects_by_name_and_prefix():
    names = ["reward/mean", "reward/std", "reward/numeric_answer", "reward/fmt/inner", "kl/ref",
             "loss/total_first_step", "loss/kl"]
    assert Panel("r", ("reward/mean", "reward/*"), ("reward/std",)).select(names) == \
        ["reward/mean", "reward/numeric_answer", "reward/fmt/inner"]
    assert Panel("l", ("loss/*",), ("loss/total_first_step",)).select(names) == ["loss/kl"]
    assert Panel("g", ("monitor/gap",), needs="monitor/gold_mean").select(names + ["monitor/gap"]) == []
    titles = [p.title for p in PANELS]
    assert len(set(titles)) == len(titles)  # each plot's alt text names it


def test_series_keeps_numbers_by_step():
    data = series([{"step": 0, "eval/accuracy": 0.1, "eval/n": 5},
                   {"step": 1, "reward/mean": 0.5, "note": "text", "ok": True},
                   {"step": 2, "reward/mean": 0.7}])
    assert data == {"eval/accuracy": ([0], [0.1]), "eval/n": ([0], [5.0]), "reward/mean": ([1, 2], [0.5, 0.7])}


def test_trailing_mean():
    assert trailing_mean([1.0, 2.0, 3.0, 4.0, 6.0], 3).tolist() == pytest.approx([2.0, 3.0, 13 / 3])


def test_a_long_run_is_drawn_smoothed(tmp_path):
    (tmp_path / "config.yaml").write_text("model: tiny\ntask: {data: my_task.jsonl}\n")
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward/mean": (s % 7) / 7,
                                                                "entropy": 1 / s}) + "\n"
                                                    for s in range(1, 201)))
    assert main(["report", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "task my_task (train my_task.jsonl)" in page and "steps logged: 200." in page
    assert page.count("<img") == 2  # reward and entropy: nothing else was logged


def test_bad_run_folders_are_named(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path} is not a run folder" in capsys.readouterr().err
    (tmp_path / "config.yaml").write_text("model: tiny\n")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\nnot json\n{"step": 2, "reward/mean": '
                                            '0.6}\n')
    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path / 'metrics.jsonl'}:2: not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "report.html").exists()
    # a torn last line is a run being written (or killed mid-write): reported without it
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n{"step": 2, "rew')
    assert main(["report", str(tmp_path)]) == 0
    assert "steps logged: 1." in (tmp_path / "report.html").read_text()
    assert main(["report", str(tmp_path), "--eval", str(tmp_path / "nowhere")]) == 2
    assert f"--eval {tmp_path / 'nowhere'}: no report.json there" in capsys.readouterr().err
    for name, content, message in [
        ("metrics.jsonl", '{"step": "one", "reward/mean": 0.5}\n{"step": 2}\n', ":1: step must be a whole number, got "
                "'one'"),
        ("metrics.jsonl", '[1, 2]\n{"step": 2}\n', ":1: expected an object as a run writes, got list"),
        ("samples.jsonl", '{"step": 1, "split": "train", "reward": "high"}\n{"step": 1}\n',
         ":1: reward must be a number, got 'high'"),
        ("config.yaml", "model: [tiny\n", ": not YAML (ParserError: while parsing a flow sequence"),
        ("config.yaml", "model: tiny\ntrain: 5\n", ": config.yaml (or monitor.json) is not the mapping a run writes"),
        ("config.yaml", "model: tiny\nreward: abc\n",
         ": config.yaml (or monitor.json) is not the mapping a run writes"),
        ("monitor.json", '{"flags": {"length": 3}}', ": config.yaml (or monitor.json) is not the mapping a run writes"),
        ("metrics.jsonl", b'{"step": 1, "reward/mean": 0.5}\n{"step": 2, "note": "\xff"}\n', ":2: not UTF-8 text"),
    ]:
        (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
        (tmp_path / "config.yaml").write_text("model: tiny\n")
        for other in ("samples.jsonl", "monitor.json"):
            (tmp_path / other).unlink(missing_ok=True)
        (tmp_path / name).write_bytes(content) if isinstance(content, bytes) else (tmp_path / name).write_text(content)
        assert main(["report", str(tmp_path)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("aha: error: ") and message in err, (message, err)


def test_run_report_with_its_eval_renders_in_a_real_browser(tmp_path, capsys, browser):
    """A real (tiny) run with a gold reward and held-out evals, then `aha eval --samples
    --out RUN/eval`: `aha report RUN` embeds every plot, and Chromium decodes them all."""
    (tmp_path / "gold.py").write_text("def exact(completion, sample):\n    return float(completion.strip() == '7')\n")
    config = say_seven(tmp_path, "train.steps=6", "eval.before=true", "eval.every=3", "train.checkpoint_every=6",
                       "train.report=true",
                       f"monitor.gold=[{{fn: '{tmp_path / 'gold.py'}:exact'}}]")
    run = Path(train(config, echo=QUIET).run_dir)
    written = (run / "report.html").read_text()  # by the training loop
    assert written.count("<img") >= 10 and "Hacking monitor" in written
    assert main(["eval", str(tmp_path / "seven.yaml"), "--samples", "4", "--model", "tiny",
                 "--model", str(run / "checkpoints/step-6"), "--out", str(run / "eval")]) == 0
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert f"Eval: {run / 'eval'}" in page and "Solved at any k" in page
    assert "Held-out greedy accuracy" in page
    images, colours = browser(run / "report.html", tmp_path, height=2400)
    alts = [alt for alt, _, _ in images]
    for title in ["Reward (mean and components)", "Held-out accuracy", "Training samples at or above the correct "
            "threshold", "Hacking monitor: trained vs gold reward",
                  "KL from the sampling policy to the trained one (off-policy drift within a step)", "Entropy",
                  "Clip fraction", "Completion length (tokens)", "Loss", "Gradient norm", "pass@k", "maj@k"]:
        assert title in alts
    assert len(alts) == len(set(alts))
    training = [(w, h) for alt, w, h in images if alt in {p.title for p in PANELS}]
    assert all((w, h) == (600, 340) for w, h in training)  # every plot decoded at full size
    assert colours > 50
    # the numbers behind the accuracy plot are the logged ones
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "eval/accuracy" in r] == [0, 3, 6]


def test_a_metrics_file_with_steps_logged_twice_is_flagged(tmp_path):
    from aha.tracking.run_report import run_report_html

    (tmp_path / "config.yaml").write_text("model: tiny\n")
    rows = [{"step": s, "reward/mean": 0.1 * s} for s in (1, 2, 3, 2, 3, 4)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = run_report_html(tmp_path)
    assert "<b>metrics.jsonl is not one run</b>: its steps go back (and 2 are logged more than once)" in page
    records = "".join(json.dumps({"step": s, "reward/mean": 0.0}) + "\n" for s in (1, 2, 3))
    (tmp_path / "metrics.jsonl").write_text(records)
    assert "not one run" not in run_report_html(tmp_path)


def test_identical_series_are_one_line_named_by_both():
    """reward/mean of a single-component reward equals that component: drawn once, both named,
    instead of the component's line drawn over (and hiding) the mean."""
    data = {"reward/mean": ([1, 2], [0.1, 0.5]), "reward/numeric_answer": ([1, 2], [0.1, 0.5]),
            "reward/format": ([1, 2], [1.0, 1.0])}
    groups = same_lines(list(data), data)
    assert groups == [["reward/mean", "reward/numeric_answer"], ["reward/format"]]
    assert line_label(groups[0], {"reward/mean": "total"}) == "reward/mean (total) = reward/numeric_answer"


def test_kl_to_the_reference_and_the_sampling_drift_are_separate_panels():
    names = ["kl/ref", "kl/old", "kl/teacher"]
    by_title = {p.title: p.select(names) for p in PANELS if p.select(names)}
    assert by_title == {"KL to the reference model": ["kl/ref"],
                        "KL from the sampling policy to the trained one (off-policy drift within a step)": ["kl/old"],
                        "KL (other estimates)": ["kl/teacher"]}
