"""eval.temperatures: samples drawn at several temperatures, each summarised alone and pooled
(pass@k over the union, majority voting over all of them), side by side."""

import json
from collections import Counter
from pathlib import Path

import pytest

from aha.cli import main
from aha.eval.compare import summarize
from aha.eval.estimators import pass_at_k
from aha.eval.temperatures import draw_seed, entry_label, pool_samples


def sample(answer: str, right: bool) -> dict:
    return {"completion": answer, "answer": answer, "score": float(right), "length": 1, "truncated": False,
            "mean_logprob": -1.0}


def test_pooled_pass_at_k_and_voting_over_two_temperatures_by_hand():
    # two temperatures, two problems, n = 2 samples each
    cold = {"p1": [sample("5", False), sample("4", True)], "p2": [sample("3", False), sample("3", False)]}
    hot = {"p1": [sample("4", True), sample("7", False)], "p2": [sample("6", True), sample("3", False)]}
    pooled = pool_samples({0.6: cold, 1.2: hot})
    assert [s["answer"] for s in pooled["p1"]] == ["5", "4", "4", "7"]  # temperature by temperature
    single = {t: summarize(by) for t, by in ((0.6, cold), (1.2, hot))}
    both = summarize(pooled)
    # alone: p1 1 of 2 right, p2 0 of 2 (cold) or 1 of 2 (hot); pass@2 = 1 with one right of two
    assert single[0.6]["curves"]["pass@k"]["mean"] == pytest.approx([(0.5 + 0) / 2, (1 + 0) / 2])
    assert single[1.2]["curves"]["pass@k"]["mean"] == pytest.approx([(0.5 + 0.5) / 2, (1 + 1) / 2])
    # pooled: n = 4; p1 c = 2: pass@2 = 1 - C(2,2)/C(4,2) = 5/6; p2 c = 1: 1 - C(3,2)/C(4,2) = 1/2
    assert both["samples_per_problem"] == 4 and both["curves"]["pass@k"]["k"] == [1, 2, 4]
    assert both["curves"]["pass@k"]["mean"] == pytest.approx([(0.5 + 0.25) / 2, (5 / 6 + 1 / 2) / 2, 1.0])
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    # voting over all n: alone, p1 is a 1-1 tie (won half the time) at either temperature; pooled, the
    # right "4" has 2 votes against 1 each for "5" and "7" and wins; p2's pool is 3 x "3" (wrong) to 1
    assert single[0.6]["curves"]["maj@k"]["mean"][-1] == pytest.approx((0.5 + 0) / 2)
    assert single[1.2]["curves"]["maj@k"]["mean"][-1] == pytest.approx((0.5 + 0.5) / 2)
    assert both["curves"]["maj@k"]["mean"][-1] == pytest.approx((1 + 0) / 2)


def test_each_temperature_draws_from_its_own_seed_whatever_the_order():
    assert draw_seed(3, None) == 3  # rollout.temperature alone: the seed samples were always drawn with
    seeds = [draw_seed(3, t) for t in (0.6, 1.0, 1.4, 1.401)]
    assert len(set(seeds)) == 4 and all(0 <= s < 2**32 for s in seeds)
    assert entry_label("m", [1.0]) == "m @ T=1" and entry_label("m", [0.6, 1.0]) == "m @ pooled T=0.6,1"


@pytest.mark.parametrize("value, message", [
    ("[1.0]", "eval.temperatures pools samples drawn at two or more temperatures"),
    ("[0.6,1.0,0.6]", "eval.temperatures lists 0.6 more than once"),
    ("[0,1.0]", "config key 'eval.temperatures.0'"),
])
def test_bad_temperatures_are_refused_naming_the_key(value, message, capsys):
    assert main(["eval", "model=tiny", f"eval.temperatures={value}", "--samples", "2"]) == 2
    assert message in capsys.readouterr().err


CONFIG = """
model: tiny
task: {{name: arithmetic, num_eval: 6}}
rollout: {{max_new_tokens: 5, batch_size: 32}}
eval: {{scorer: '{scorer}:has_digit'}}
"""


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def run_eval(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_samples_at_each_temperature_are_cached_apart_and_pooled(tmp_path, capsys):
    scorer = tmp_path / "score.py"
    scorer.write_text("def has_digit(completion, sample):\n    return float(any(c.isdigit() for c in completion))\n")
    config = tmp_path / "eval.yaml"
    config.write_text(CONFIG.format(scorer=scorer))
    out = tmp_path / "out"
    args = [str(config), "eval.temperatures=[0.5,2.0]", "--samples", "4", "--model", "tiny", "--out", str(out)]
    report = run_eval(capsys, *args)
    cold, hot, pooled = "tiny @ T=0.5", "tiny @ T=2", "tiny @ pooled T=0.5,2"
    assert report["temperatures"] == [0.5, 2.0] and list(report["models"]) == [cold, hot, pooled]
    assert [report["models"][m]["temperatures"] for m in (cold, hot, pooled)] == [[0.5], [2.0], [0.5, 2.0]]
    folders = {t: out / "samples" / f"tiny@T{t}" for t in ("0.5", "2")}
    assert [json.loads((f / "meta.json").read_text())["temperature"] for f in folders.values()] == [0.5, 2.0]
    drawn = {t: records(f) for t, f in folders.items()}
    assert [len(r) for r in drawn.values()] == [24, 24]
    # the temperature took effect: colder samples are likelier under their own (sharper) distribution
    mean = {t: sum(r["mean_logprob"] for r in got) / len(got) for t, got in drawn.items()}
    assert mean["0.5"] > mean["2"]
    # the pool, recomputed from the two caches: pass@k over 8 samples a problem, voting over all 8
    by_problem = {}
    for got in drawn.values():
        for r in got:
            by_problem.setdefault(r["id"], []).append(r)
    ids = sorted(by_problem)
    right = [sum(r["score"] >= 0.5 for r in by_problem[i]) for i in ids]
    curve = report["models"][pooled]["curves"]["pass@k"]
    assert report["models"][pooled]["samples_per_problem"] == 8 and curve["k"] == [1, 2, 4, 8]
    assert curve["mean"] == pytest.approx([sum(pass_at_k(8, c, k) for c in right) / len(ids) for k in curve["k"]])
    assert 0 < curve["mean"][0] < 1  # the scorer is neither always nor never met
    assert curve["mean"][-1] == pytest.approx(sum(c > 0 for c in right) / len(ids))  # solved by some sample
    assert curve["mean"][-1] >= max(report["models"][m]["curves"]["pass@k"]["mean"][-1] for m in (cold, hot))
    assert report["models"][pooled]["curves"]["maj@k"]["mean"][-1] == pytest.approx(
        sum(voted(by_problem[i]) for i in ids) / len(ids))
    for single in (cold, hot):
        assert report["models"][single]["curves"]["pass@k"]["k"] == [1, 2, 4]
    assert report["comparison"] == {}  # one model

    # again: nothing is drawn; a third temperature draws only its own samples
    assert run_eval(capsys, *args) == report
    wider = run_eval(capsys, *[a if a != "eval.temperatures=[0.5,2.0]" else "eval.temperatures=[0.5,1.0,2.0]"
                               for a in args])
    assert [records(f) for f in folders.values()] == list(drawn.values())
    assert len(records(out / "samples/tiny@T1")) == 24
    assert wider["models"]["tiny @ pooled T=0.5,1,2"]["samples_per_problem"] == 12

    # printed: one table, each temperature beside the pool; the plot and HTML table hold all three
    capsys.readouterr()
    assert main(["eval", *args]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "tiny: 6 problems x 4 samples at each of 2 temperatures (8 pooled)"
    assert printed[1].split() == ["temperature", "pass@1", "pass@4", "pass@8", "maj@4", "maj@8", "mean", "length"]
    assert [line.split()[0] for line in printed[2:5]] == ["T=0.5", "T=2", "pooled"]
    assert printed[2].split()[3] == "-" and printed[4].split()[3] == f"{curve['mean'][-1]:.1%}"
    page = (out / "report.html").read_text()
    assert all(name in page for name in (cold, hot, pooled))


def voted(samples: list[dict]) -> float:
    """maj@n by counting: the share of the most-voted answers that are right (ties split evenly)."""
    votes = Counter(s["answer"] for s in samples if s["answer"] is not None)
    if not votes:
        return 0.0
    top = max(votes.values())
    leaders = [a for a, v in votes.items() if v == top]
    right = {s["answer"] for s in samples if s["score"] >= 0.5}
    return sum(a in right for a in leaders) / len(leaders)
