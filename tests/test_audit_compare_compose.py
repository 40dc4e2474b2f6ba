"""Audit: which coverage group each problem lands in when `aha eval --samples` compares two
models (eval/compare.py, the console line, the report), and gates whose gate_min <= 0 when
the gate's function fails (rewards/compose.py: a failing reward scores 0, so such a gate
would pass on a failure unless the failure itself closes it, as docs/rewards.md says)."""

import math

import pytest

from aha.eval.compare import compare, examples, summarize
from aha.rewards.compose import Component, CompositeReward
from aha.rewards.functions import batched
from aha.tracking.report import eval_report_html

# ---------------------------------------------------------------- eval comparison groups

# scores of 4 samples per problem (>= 0.5 is correct); the dicts are in no sorted order
A_SCORES = {"p5": [1, 1, 1, 1], "p3": [0, 0, 0, 0.4], "p1": [0, 1, 0, 0], "p4": [0.49, 0, 0, 0],
            "p2": [0.5, 0, 0, 0], "a_only": [1, 1, 0, 0], "p6": [0, 0, 1, 0]}
B_SCORES = {"p2": [0, 0, 0, 0], "p4": [0, 0, 0, 0.2], "p1": [1, 0, 0, 0], "p3": [0, 0.5, 0, 0],
            "p5": [0, 0, 0, 1], "b_only": [0, 0, 0, 0], "p6": [0, 0, 0, 0]}
GROUPS = {"both": ["p1", "p5"], "only_a": ["p2", "p6"], "only_b": ["p3"], "neither": ["p4"]}


def by_problem(scores: dict) -> dict:
    return {pid: [{"completion": f"{pid} #{j}", "answer": str(j), "score": float(x), "length": 4, "truncated": False,
                   "mean_logprob": -0.1 * j} for j, x in enumerate(xs)] for pid, xs in scores.items()}


def two_models() -> tuple[dict, dict]:
    summaries = {"a": summarize(by_problem(A_SCORES)), "b": summarize(by_problem(B_SCORES))}
    return summaries, compare(summaries)


def test_each_problem_lands_in_its_coverage_group():
    """Catches a problem put in the wrong group: only_a/only_b swapped or overlapping with
    both, a score of exactly 0.5 not counted as correct (>= for >), a single correct sample
    not counted as solved, or a problem only one model was asked about counted at all."""
    summaries, comparison = two_models()
    assert summaries["a"]["solved"] == {"a_only": 2, "p1": 1, "p2": 1, "p3": 0, "p4": 0, "p5": 4, "p6": 1}
    assert summaries["b"]["solved"] == {"b_only": 0, "p1": 1, "p2": 0, "p3": 1, "p4": 0, "p5": 1, "p6": 0}
    assert comparison["models"] == ["a", "b"]
    assert comparison["coverage"] == GROUPS


def test_the_groups_follow_the_models_order():
    """Catches the models' solved lists swapped: with b first, only_a holds what b alone solves."""
    summaries, _ = two_models()
    swapped = compare({"b": summaries["b"], "a": summaries["a"]})
    assert swapped["models"] == ["b", "a"]
    assert swapped["coverage"] == {"both": ["p1", "p5"], "only_a": ["p3"], "only_b": ["p2", "p6"], "neither": ["p4"]}


def test_examples_are_drawn_from_each_group_with_their_solve_counts():
    """Catches an example filed under another group than its problem's, or its counts wrong."""
    _, comparison = two_models()
    problems = [{"id": pid, "prompt": f"question {pid}", "answer": "1"} for pid in sorted(A_SCORES | B_SCORES)]
    samples = {"a": by_problem(A_SCORES), "b": by_problem(B_SCORES)}
    got = examples(problems, samples, comparison, per_group=2)
    assert [(e["group"], e["id"]) for e in got] == [("both", "p1"), ("both", "p5"), ("only_a", "p2"), ("only_a", "p6"),
                                                    ("only_b", "p3"), ("neither", "p4")]
    assert [(e["models"]["a"]["correct"], e["models"]["b"]["correct"]) for e in got] == [(1, 1), (4, 1), (1, 0), (1, 0),
                                                                                           (0, 1), (0, 0)]
    assert got[0]["models"]["a"]["sample"] == "p1 #1" and got[5]["models"]["a"]["sample"] == "p4 #0"
    assert [e["id"] for e in examples(problems, samples, comparison, per_group=1)] == ["p1", "p2", "p3", "p4"]


def test_the_console_and_the_report_count_each_group_under_its_model(monkeypatch, tmp_path, capsys):
    """Catches the console line of `aha eval --samples --model a --model b` or the report's
    sentence counting one model's problems under the other's name."""
    import aha.eval.study
    from aha import cli

    summaries, comparison = two_models()
    report = {"task": "t", "samples_per_problem": 4, "models": summaries, "comparison": comparison, "examples": []}
    monkeypatch.setattr(aha.eval.study, "run_study", lambda config, models, n, out: report)
    assert cli.main(["eval", "model=tiny", "--samples", "4", "--model", "a", "--model", "b", "--out",
                     str(tmp_path)]) == 0
    assert "solved at any k: both 2, only a 2, only b 1, neither 1\n" in capsys.readouterr().out
    assert "Solved at any k: both 2, only a 2, only b 1, neither 1." in eval_report_html(report)


# ---------------------------------------------------------------- gates with gate_min <= 0


def score(completion, sample):
    return 2.0


FAILURES = {"none": None, "nan": math.nan, "text": "oops"}


def gate(completion, sample):
    """The completion is the gate's value; 'raise', 'none', 'nan' and 'text' fail in those ways."""
    if completion == "raise":
        raise RuntimeError("gate broke")
    return FAILURES[completion] if completion in FAILURES else float(completion)


def composite(gate_min: float, gate_fn=gate, **gate_kwargs) -> CompositeReward:
    return CompositeReward([Component("score", score, weight=1.5),
                            Component("gate", gate_fn, combine="gate", gate_min=gate_min, **gate_kwargs)])


SAMPLES = [{"id": str(i)} for i in range(8)]


@pytest.mark.parametrize("gate_min", [0.0, -1.0])
def test_a_failing_gate_closes_even_when_gate_min_is_at_most_0(gate_min):
    """Catches a failed gate scored as value 0 and compared with gate_min: with gate_min <= 0,
    0 >= gate_min would pass, so a gate that raises, returns None / NaN / a non-number lets
    the total through. docs/rewards.md: 'a function that raises scores 0 for that sample (so
    a raising gate closes)'."""
    reward = composite(gate_min)
    texts = ["raise", "none", "nan", "text", "0", "-1", "-1.5", "3"]
    result = reward.score(texts, SAMPLES[:8])
    passing = [v >= gate_min for v in (0.0, -1.0, -1.5, 3.0)]
    assert result.total.tolist() == [0.0] * 4 + [3.0 if ok else 0.0 for ok in passing]
    assert result.failed.tolist() == [True] * 4 + [False] * 4
    assert result.failures == {"gate": 4}
    assert result.components["gate"].tolist() == [0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -1.5, 3.0]  # finite, failures 0
    assert reward.formula() == f"1.5*score * [gate >= {gate_min:g}]"


def test_a_gate_passes_at_exactly_gate_min():
    """Catches the gate's comparison made strict (> for >=): value == gate_min passes."""
    for gate_min, text in ((0.0, "0"), (-1.0, "-1"), (1.0, "1")):
        assert composite(gate_min).score([text], SAMPLES[:1]).total.tolist() == [3.0]
        assert composite(gate_min).score([str(gate_min - 0.01)], SAMPLES[:1]).total.tolist() == [0.0]


def test_a_batched_gate_that_gives_no_score_closes_at_gate_min_0():
    """Catches a batched gate's None read as a score of 0 (which passes gate_min 0) instead of
    a failure that closes the gate."""

    @batched
    def batch_gate(completions, samples):
        return [None if c == "none" else float(c) for c in completions]

    result = composite(0.0, batch_gate, batched=True).score(["none", "0", "2"], SAMPLES[:3])
    assert result.total.tolist() == [0.0, 3.0, 3.0] and result.failed.tolist() == [True, False, False]


def test_a_floor_does_not_pay_a_failed_sum_term_or_reopen_a_failed_gate():
    """Catches clip_min applied to a failure's 0: a failed sum term would earn its floor (and a
    failed gate with clip_min >= gate_min could pass)."""

    def term(completion, sample):
        if completion == "term fails":
            raise ValueError("term broke")
        return 2.0 if completion == "ok" else 0.25

    def check(completion, sample):
        if completion == "gate fails":
            raise ValueError("gate broke")
        return -0.5

    reward = CompositeReward([Component("term", term, weight=2.0, clip_min=0.5),
                              Component("gate", check, combine="gate", gate_min=0.0, clip_min=1.0)])
    result = reward.score(["term fails", "gate fails", "low", "ok"], SAMPLES[:4])
    assert result.total.tolist() == [0.0, 0.0, 2.0 * 0.5, 2.0 * 2.0]  # the gate passes on its floor, never on a failure
    assert result.components["term"].tolist() == [0.0, 0.25, 0.25, 2.0]  # logged unclipped
    assert result.components["gate"].tolist() == [-0.5, 0.0, -0.5, -0.5]
    assert result.failures == {"term": 1, "gate": 1} and result.failed.tolist() == [True, True, False, False]
