"""pass@k, voting, best-of-N, coverage, length and calibration, against exact enumeration,
exact combinatorics and simulation."""

import itertools
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from aha.eval.estimators import (
    best_of_k,
    bootstrap_ci,
    brier_score,
    coverage,
    expected_calibration_error,
    ks_up_to,
    length_stats,
    pass_at_k,
    pass_at_k_table,
    vote_at_k,
)


def test_pass_at_k_is_exact_for_every_small_case():
    worst = 0.0
    for n in range(1, 31):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - Fraction(comb(n - c, k), comb(n, k))
                worst = max(worst, abs(pass_at_k(n, c, k) - float(exact)))
    assert worst < 1e-12


@pytest.mark.parametrize("n, c, k", [(1024, 1, 1), (1024, 3, 256), (1024, 37, 64), (1024, 500, 2), (1000, 10, 1000)])
def test_pass_at_k_agrees_with_simulation_for_large_n(n, c, k):
    # the number of correct samples in a random k-subset is hypergeometric: simulate it
    rng = np.random.default_rng(0)
    draws = 200_000
    hits = rng.hypergeometric(c, n - c, k, size=draws) > 0
    estimate, se = hits.mean(), hits.std() / np.sqrt(draws)
    assert abs(pass_at_k(n, c, k) - estimate) <= 4 * se + 1e-12


def test_pass_at_k_bounds_and_errors():
    assert pass_at_k(256, 0, 256) == 0.0 and pass_at_k(256, 1, 256) == 1.0
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)
    table = pass_at_k_table([4, 2], [1, 2], [1, 4])
    assert table[0].tolist() == [0.25, 1.0] and table[1, 0] == 1.0 and np.isnan(table[1, 1])


def test_ks_up_to():
    assert ks_up_to(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert ks_up_to(6) == [1, 2, 4, 6] and ks_up_to(1) == [1]


def _enumerate(n, k, pick):
    """The mean over all k-subsets of pick(subset) (a subset's expected correctness)."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(pick(s) for s in subsets) / len(subsets)


def test_best_of_k_equals_enumeration_with_ties():
    scores = [0.9, 0.9, 0.5, 0.5, 0.5, 0.1, 0.0]
    correct = [True, False, True, True, False, True, False]

    def pick(subset):
        top = max(scores[i] for i in subset)
        leaders = [i for i in subset if scores[i] == top]
        return sum(correct[i] for i in leaders) / len(leaders)

    for k in range(1, 8):
        assert best_of_k(scores, correct, k) == pytest.approx(_enumerate(7, k, pick), abs=1e-12), k
    assert best_of_k(scores, correct, 1) == pytest.approx(4 / 7)  # one sample: its mean correctness
    assert best_of_k(scores, correct, 7) == 0.5  # all: a coin flip between the two 0.9s


def test_majority_and_weighted_votes():
    answers = ["12", "12", "15", None]
    correct = [True, True, False, False]
    assert vote_at_k(answers, correct, 4) == 1.0
    assert vote_at_k(["12", "15"], [True, False], 2) == 0.5  # a tie, broken at random
    assert vote_at_k([None, None], [False, False], 2) == 0.0  # nobody answered
    # one confident wrong voter outweighs two unsure right ones
    assert vote_at_k(answers, correct, 4, weights=[0.2, 0.2, 0.9, 1.0]) == 0.0


def test_vote_at_k_agrees_with_enumeration():
    answers = ["a", "b", "a", "c", "b", "b", None, "a"]
    correct = [a == "a" for a in answers]

    def pick(subset):
        tally = Counter(answers[i] for i in subset if answers[i] is not None)
        if not tally:
            return 0.0
        top = max(tally.values())
        leaders = [a for a, v in tally.items() if v == top]
        return sum(a == "a" for a in leaders) / len(leaders)

    for k in (1, 3, 5):
        exact = _enumerate(8, k, pick)
        estimate = vote_at_k(answers, correct, k, draws=20_000, seed=1)
        assert abs(estimate - exact) < 0.015, (k, estimate, exact)


def test_bootstrap_interval_holds_the_mean_and_narrows_with_more_problems():
    rng = np.random.default_rng(0)
    small = rng.random((20, 3))
    lo, hi = bootstrap_ci(small, draws=2000)
    assert np.all(lo < small.mean(axis=0)) and np.all(small.mean(axis=0) < hi)
    big = rng.random((2000, 3))
    lo_big, hi_big = bootstrap_ci(big, draws=2000)
    assert np.all(hi_big - lo_big < (hi - lo) / 5)
    again = bootstrap_ci(small, draws=2000)
    assert np.array_equal(again[0], lo)  # seeded: the same interval every time


def test_coverage_length_and_calibration_by_hand():
    cov = coverage([True, True, False, False], [True, False, True, False])
    assert cov == {"both": [0], "only_a": [1], "only_b": [2], "neither": [3]}
    stats = length_stats([10, 20, 30, 40, 50], [False, False, False, False, True], quantiles=(0.5,))
    assert stats == {"mean": 30.0, "truncated_frac": 0.2, "p50": 30.0}
    # bin 9: accuracy 0.5 at confidence 0.9; bin 2: accuracy 0 at 0.2; each half the samples
    assert expected_calibration_error([0.9, 0.9, 0.2, 0.2], [1, 0, 0, 0]) == pytest.approx(0.5 * 0.4 + 0.5 * 0.2)
    assert expected_calibration_error([1.0, 1.0], [1, 1]) == 0.0  # 1.0 falls in the last bin
    assert brier_score([0.9, 0.9, 0.2, 0.2], [1, 0, 0, 0]) == pytest.approx((0.01 + 0.81 + 0.04 + 0.04) / 4)


def test_best_of_k_ranks_a_failed_score_last():
    nan = float("nan")
    # the NaN sample is correct but never chosen over a scored one; with k = 1 it is picked 1/3 of the time
    assert best_of_k([nan, 0.1, 0.2], [True, False, False], 2) == pytest.approx(0.0)
    assert best_of_k([nan, 0.1, 0.2], [True, False, False], 1) == pytest.approx(1 / 3)


def test_vote_answer_is_correct_when_any_sample_giving_it_was():
    # the scorer read more than the answer and disagreed between two "7"s: the order must not matter
    assert vote_at_k(["7", "7", "3"], [False, True, False], 3) == vote_at_k(["7", "7", "3"], [True, False, False],
                                                                            3) == 1.0


ESTIMATORS = ["best_of_k", "bootstrap_ci", "brier_score", "coverage", "expected_calibration_error", "ks_up_to",
              "length_stats", "pass_at_k", "pass_at_k_table", "vote_at_k"]


def test_estimators_are_exported_from_aha_eval():
    import aha.eval
    import aha.eval.estimators

    for name in ESTIMATORS:
        assert getattr(aha.eval, name) is getattr(aha.eval.estimators, name) and name in aha.eval.__all__
    from aha.eval import pass_at_k as exported

    assert exported(10, 3, 1) == pytest.approx(0.3)


@pytest.mark.parametrize("first", ["aha.eval", "aha.eval.estimators"])
def test_aha_eval_imports_from_a_fresh_interpreter_in_any_order(first):
    # an import cycle shows only in a fresh process, and only for some orders
    code = f"import {first}\nfrom aha.eval import {', '.join(ESTIMATORS)}\nprint(pass_at_k(4, 2, 2))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == pytest.approx(1 - 1 / 6)  # 1 - C(2, 2) / C(4, 2)
