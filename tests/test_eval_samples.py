"""`aha eval --samples`: samples drawn once and cached, curves over k, two models compared."""

import json
from pathlib import Path

import pytest

from aha.cli import main
from aha.eval.sampling import CacheMismatch, SampleCache, vote_key


@pytest.fixture
def setup(scored_run):
    return scored_run(10)


def run_eval(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def lines(folder: Path) -> list[str]:
    return (folder / "samples.jsonl").read_text().splitlines()


def test_two_models_are_sampled_once_and_compared(setup, tmp_path, capsys):
    config, checkpoint = setup
    out = tmp_path / "out"
    voting = f"eval.scorer={config.parent / 'score.py'}:has_digit"  # right answers are numbers: maj@k can be read
    args = [str(config), voting, "--samples", "8", "--model", "tiny", "--model", str(checkpoint), "--out", str(out)]
    report = run_eval(capsys, *args)
    assert list(report["models"]) == ["tiny", str(checkpoint)]
    for summary in report["models"].values():
        assert summary["problems"] == 10 and summary["samples_per_problem"] == 8
        curve = summary["curves"]["pass@k"]
        assert curve["k"] == [1, 2, 4, 8]
        assert all(a <= b + 1e-12 for a, b in zip(curve["mean"], curve["mean"][1:]))  # more tries never hurt
        assert all(lo <= m <= hi for lo, m, hi in zip(curve["lo"], curve["mean"], curve["hi"]))
        assert 0 < curve["mean"][0] < 1  # the scorer is neither always nor never met
        assert {"maj@k", "best_of_k (mean log-prob)"} <= set(summary["curves"])
        assert summary["length"]["mean"] > 0
    coverage = report["comparison"]["coverage"]
    assert sorted(sum(coverage.values(), [])) == sorted(report["models"]["tiny"]["solved"])
    folders = sorted((out / "samples").iterdir())
    assert [len(lines(f)) for f in folders] == [80, 80]

    # again: nothing is sampled, the report is the same
    before = [lines(f) for f in folders]
    assert run_eval(capsys, *args) == report
    assert [lines(f) for f in folders] == before
    # more samples: only the missing ones are drawn, the old ones are kept as they were
    bigger = run_eval(capsys, *[a if a != "8" else "12" for a in args])
    assert [len(lines(f)) for f in folders] == [120, 120]
    assert [lines(f)[:80] for f in folders] == before
    assert bigger["models"]["tiny"]["curves"]["pass@k"]["k"] == [1, 2, 4, 8, 12]
    # fewer problems reuse the cache; so would more (eval.limit changes nothing else)
    fewer = run_eval(capsys, args[0], "eval.limit=4", *[a if a != "8" else "12" for a in args[1:]])
    assert fewer["models"]["tiny"]["problems"] == 4 and [len(lines(f)) for f in folders] == [120, 120]


def test_a_cache_is_never_mixed_with_other_settings(setup, tmp_path, capsys):
    config, _ = setup
    out = tmp_path / "out"
    run_eval(capsys, str(config), "--samples", "2", "--model", "tiny", "--out", str(out))
    assert main(["eval", str(config), "rollout.temperature=0.5", "--samples", "2", "--model", "tiny", "--out",
                 str(out)]) == 2
    assert "temperature: 1.0 there, 0.5 asked" in capsys.readouterr().err


def test_a_torn_last_line_is_dropped_and_resampled(tmp_path):
    cache = SampleCache(tmp_path, {"model": "m"})
    cache.append([{"id": "p1", "score": 1.0}, {"id": "p1", "score": 0.0}])
    with open(tmp_path / "samples.jsonl", "a") as f:
        f.write('{"id": "p1", "sco')  # the process died mid-write
    assert [r["score"] for r in cache.load()["p1"]] == [1.0, 0.0]
    assert len(lines(tmp_path)) == 2
    with pytest.raises(CacheMismatch, match="model: 'm' there, 'other' asked"):
        SampleCache(tmp_path, {"model": "other"})


def test_vote_key():
    assert vote_key("so 12.0 it is") == vote_key(r"\boxed{12}") == "12"
    assert vote_key("<answer>Paris</answer>") == "Paris"
    assert vote_key("no idea") is None


def test_report_html_renders_its_plots_in_a_real_browser(setup, tmp_path, capsys, browser):
    """report.html opens offline in headless Chromium and every plot decodes to a full-size image."""
    config, checkpoint = setup
    out = tmp_path / "out"
    run_eval(capsys, str(config), f"eval.scorer={config.parent / 'score.py'}:has_digit", "--samples", "4", "--model",
             "tiny",
             "--model", str(checkpoint), "--out", str(out))
    page = (out / "report.html").read_text()
    assert page.count("<img") == 5 and "Solved at any k" in page and "Examples" in page
    images, colours = browser(out / "report.html", tmp_path)
    assert [alt for alt, _, _ in images] == ["pass@k", "maj@k", "best_of_k (mean log-prob)", "best_of_k "
            "(self-certainty)",
                                            "weighted maj@k (self-certainty)"]
    assert all(width == 600 and height == 400 for _, width, height in images)  # decoded, full size
    assert colours > 50  # plots, not a blank page


def test_token_certainty_is_the_kl_from_uniform():
    import math

    import torch

    from aha.rollout.hf_engine import token_certainty

    steps = (torch.zeros(2, 4), torch.tensor([[0.0, 0.0, 0.0, math.log(3)], [100.0, 0.0, 0.0, 0.0]]))
    got = torch.stack([token_certainty(step) for step in steps], dim=1)
    skewed = -math.log(4) - (3 * math.log(1 / 6) + math.log(1 / 2)) / 4  # p = (1/6, 1/6, 1/6, 1/2)
    assert got[:, 0].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)  # uniform: no certainty
    assert got[:, 1].tolist() == pytest.approx([skewed, 75 - math.log(4)], rel=1e-5)


def test_samples_carry_self_certainty_and_rank_by_rewards_score_each_sample_once(setup, tmp_path, capsys):
    config, _ = setup
    scorer = tmp_path / "score.py"
    scorer.write_text(scorer.read_text() + "def flaky(completion, sample):\n"
                      "    if 'e' in completion:\n        raise ValueError('no e')\n    return len(completion)\n")
    out = tmp_path / "out"
    args = [str(config), f"eval.scorer={scorer}:has_digit",
            f"eval.rank_by=[{{fn: '{scorer}:has_digit', name: oracle}}, {{fn: '{scorer}:flaky'}}]",
            "--samples", "8", "--model", "tiny", "--out", str(out)]
    report = run_eval(capsys, *args)
    records = [json.loads(line) for line in lines(out / "samples/tiny")]
    assert all(r["self_certainty"] >= 0 for r in records)  # a KL divergence
    curves = report["models"]["tiny"]["curves"]
    assert {"best_of_k (self-certainty)", "weighted maj@k (self-certainty)", "best_of_k (flaky)"} <= set(curves)
    # ranking by the verifier itself picks a correct sample whenever one of the k is: best-of-k = pass@k
    assert curves["best_of_k (oracle)"]["mean"] == pytest.approx(curves["pass@k"]["mean"])
    # only correct samples carry a vote: with all n voting, a problem is won whenever a correct sample gave an answer
    voiced = {r["id"] for r in records if r["score"] >= 0.5 and r["answer"] is not None}
    assert curves["weighted maj@k (oracle)"]["mean"][-1] == pytest.approx(len(voiced) / 10)
    ranks = sorted((out / "samples/tiny/ranks").iterdir())
    assert [p.name.split("-")[0] for p in ranks] == ["flaky", "oracle"]
    assert [len(lines_of(p)) for p in ranks] == [80, 80]
    flaky = [json.loads(line)["score"] for line in lines_of(ranks[0])]
    assert any(s != s for s in flaky) == any("e" in r["completion"] for r in records)  # failed: NaN, ranked last
    assert run_eval(capsys, *args) == report and [len(lines_of(p)) for p in ranks] == [80, 80]  # nothing scored twice
    assert main(["eval", str(config), f"eval.rank_by=[{{fn: '{scorer}:has_a', name: self-certainty}}]", "--samples",
                 "8",
                 "--model", "tiny", "--out", str(out)]) == 2
    assert "eval.rank_by[0]: the name 'self-certainty' is taken" in capsys.readouterr().err


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_task_flag_replaces_the_config_task(tmp_path, capsys):
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text('{"prompt": "What is 2 + 2?", "answer": "4"}\n{"prompt": "What is 3 + 3?", "answer": "6"}\n')
    report = run_eval(capsys, "model=tiny", "--task", str(held_out), "--samples", "3", "--model", "tiny",
                      "--out", str(tmp_path / "out"))  # no config file: only overrides
    assert report["task"] == "held_out" and report["models"]["tiny"]["problems"] == 2
    assert main(["eval", "model=tiny", "--task", str(tmp_path / "missing.jsonl")]) == 2
    assert f"task data file not found: {tmp_path / 'missing.jsonl'}" in capsys.readouterr().err


def test_a_cache_drawn_before_self_certainty_leaves_only_that_curve_out():
    from aha.eval.compare import compare, summarize
    from aha.tracking.report import eval_report_html

    def samples(with_certainty: bool) -> dict:
        out = {}
        for p in ("p1", "p2"):
            out[p] = [{"completion": f"{j}", "answer": f"{j}", "score": float(j == 1), "length": 3, "truncated": False,
                       "mean_logprob": -j / 10,
                       **({"self_certainty": j / 5} if with_certainty else {})} for j in range(4)]
        return out

    new, old = summarize(samples(True)), summarize(samples(False))
    assert "best_of_k (self-certainty)" in new["curves"] and "best_of_k (self-certainty)" not in old["curves"]
    assert old["curves"]["pass@k"] == new["curves"]["pass@k"]
    # ranked by mean log-prob (higher for lower j) the correct j = 1 sample wins whenever j = 0 is not drawn
    # C(2, k-1) / C(4, k)
    assert new["curves"]["best_of_k (mean log-prob)"]["mean"] == pytest.approx([1 / 4, 2 / 6, 0.0])
    # ranked by self-certainty (higher for higher j) it wins only against j = 0
    # C(1, k-1) / C(4, k)
    assert new["curves"]["best_of_k (self-certainty)"]["mean"] == pytest.approx([1 / 4, 1 / 6, 0.0])
    report = {"task": "t", "models": {"new": new, "old": old}, "comparison": compare({"new": new, "old": old})}
    page = eval_report_html(report)
    assert page.count("<img") == len(new["curves"]) and "<td>-</td>" in page


def test_voting_is_not_computable_when_correct_samples_have_no_readable_answer():
    from aha.eval.compare import voting_blocker

    assert voting_blocker([None, None, None], [True, False, True]).startswith("no sample has an answer voting can read")
    # half of the correct samples readable: maj@k would undercount them
    assert voting_blocker(["4", None, "5", None], [True, True, False, False]).startswith(
        "only 50% of the samples judged correct have an answer voting can read")
    assert voting_blocker(["4"] * 9 + [None], [True] * 10) is None  # 90% readable: enough
    assert voting_blocker(["4"] * 8 + [None] * 2, [True] * 10) is not None
    assert voting_blocker(["4", "5"], [False, False]) is None  # nothing correct: maj@k is a measured 0


def test_free_text_answers_report_maj_at_k_as_not_computable_instead_of_zero():
    from aha.eval.compare import summarize
    from aha.tracking.report import eval_report_html

    # a capitals task: right answers in prose, which voting cannot read
    by_problem = {p: [{"completion": "The capital is Paris.", "answer": None, "score": 1.0, "length": 5,
                       "truncated": False, "mean_logprob": -0.1}] * 4 for p in ("p1", "p2")}
    summary = summarize(by_problem)
    assert "maj@k" not in summary["curves"] and not any(c.startswith("weighted maj@k") for c in summary["curves"])
    assert summary["not_computable"]["maj@k"].startswith("no sample has an answer voting can read")
    assert summary["curves"]["pass@k"]["mean"] == [1.0, 1.0, 1.0]
    page = eval_report_html({"task": "capitals", "models": {"m": summary}, "comparison": None})
    assert "<b>maj@k not computable</b> for m: no sample has an answer voting can read" in page
    # the same samples with a readable answer do vote
    readable = {p: [dict(s, answer="Paris") for s in samples] for p, samples in by_problem.items()}
    assert summarize(readable)["curves"]["maj@k"]["mean"] == [1.0, 1.0, 1.0]
