"""What a set of samples says about a model: pass@k, majority and weighted voting,
best-of-N, coverage, length and calibration. Pure functions of numbers (numpy, float64);
they know nothing of models or files.

Every "@k" quantity is estimated from n >= k samples per problem as the expectation over
a uniformly random k-subset of them, so one set of n samples gives the whole curve
k = 1, 2, 4, ..., n, and the curves of two models sampled alike are comparable.
"""

from __future__ import annotations

import numpy as np


def comb_ratio(m: int, n: int, k: int) -> float:
    """C(m, k) / C(n, k) for 0 <= m <= n, as a product of k factors in [0, 1]: no huge
    binomials, no cancellation, exact to float64 rounding for n in the thousands."""
    if k > m:
        return 0.0
    i = np.arange(k, dtype=np.float64)
    return float(np.prod((m - i) / (n - i)))


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c are correct (Chen et al.
    2021): 1 - C(n - c, k) / C(n, k), the chance that a random k-subset holds a correct one."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 - comb_ratio(n - c, n, k)


def ks_up_to(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n itself."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else ks + [n]


def pass_at_k_table(ns: list[int], cs: list[int], ks: list[int]) -> np.ndarray:
    """(problems, len(ks)) per-problem pass@k; a k above a problem's n is NaN."""
    return np.array([[pass_at_k(n, c, k) if k <= n else np.nan for k in ks] for n, c in zip(ns, cs)])


def bootstrap_ci(per_problem: np.ndarray, level: float = 0.95, draws: int = 1000, seed: int = 0
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean over problems (rows), for each column:
    the uncertainty from which problems were drawn, at fixed samples per problem."""
    values = np.asarray(per_problem, dtype=np.float64)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(values), size=(draws, len(values)))
    means = np.nanmean(values[rows], axis=1)
    tail = (1 - level) / 2 * 100
    return np.percentile(means, tail, axis=0), np.percentile(means, 100 - tail, axis=0)


def best_of_k(scores: list[float], correct: list[bool], k: int) -> float:
    """Expected correctness of the highest-scored of a random k-subset of the n samples,
    exactly (ties broken uniformly at random). The score is anything that ranks samples:
    a reward model, a verifier oracle, self-certainty. NaN (a failed score) ranks last."""
    n = len(scores)
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    scores = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-np.inf)
    order = np.argsort(-scores, kind="stable")
    ranked_scores = scores[order]
    ranked_correct = np.asarray(correct, dtype=np.float64)[order]
    expected, start = 0.0, 0
    while start < n:  # a group of tied scores at ranks [start, end)
        end = start + 1
        while end < n and ranked_scores[end] == ranked_scores[start]:
            end += 1
        # P(no sample ranked above the group, and at least one of the group, is in the subset)
        p_group = comb_ratio(n - start, n, k) - comb_ratio(n - end, n, k)
        expected += p_group * ranked_correct[start:end].mean()
        start = end
    return expected


def vote_at_k(answers: list[str | None], correct: list[bool], k: int, weights: list[float] | None = None,
              draws: int = 200, seed: int = 0) -> float:
    """maj@k (weights None) or weighted voting: the chance that the answer with the most
    (weighted) votes in a random k-subset is a correct one, by Monte Carlo over `draws`
    subsets (exact when k = n and there is no tie). Samples without an answer (None) do
    not vote; a subset with no votes is wrong; ties are broken uniformly at random.
    An answer counts as correct when a sample giving it was judged correct (a verifier
    that reads only the answer judges them all alike; one that reads more may not)."""
    n = len(answers)
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    distinct = sorted({a for a in answers if a is not None})
    if not distinct:
        return 0.0
    slot = {a: i for i, a in enumerate(distinct)}
    ids = np.array([slot[a] if a is not None else len(distinct) for a in answers])  # None: a last, voiceless slot
    right = np.zeros(len(distinct) + 1)
    for a, c in zip(answers, correct):
        if a is not None and c:
            right[slot[a]] = 1.0
    votes = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    rng = np.random.default_rng(seed)
    rows = 1 if k == n else draws
    # each row: the first k of a random permutation, i.e. a uniformly random k-subset
    subsets = np.arange(n)[None, :].repeat(rows, 0) if k == n else np.argsort(rng.random((rows, n)), axis=1)[:, :k]
    tally = np.zeros((rows, len(distinct) + 1))
    np.add.at(tally, (np.arange(rows)[:, None], ids[subsets]), votes[subsets])
    tally = tally[:, :-1]  # drop the voiceless slot
    top = tally.max(axis=1, keepdims=True)
    leaders = (tally == top) & (top > 0)
    # a random tie-break's expected result; a subset with no votes is wrong
    wins = np.where(leaders.any(axis=1), (leaders * right[:-1]).sum(axis=1) / np.maximum(leaders.sum(axis=1), 1), 0.0)
    return float(wins.mean())


def coverage(solved_a: list[bool], solved_b: list[bool]) -> dict[str, list[int]]:
    """Which problems each model solves at all (any correct sample), by index."""
    pairs = list(zip(solved_a, solved_b))
    return {"both": [i for i, (a, b) in enumerate(pairs) if a and b],
            "only_a": [i for i, (a, b) in enumerate(pairs) if a and not b],
            "only_b": [i for i, (a, b) in enumerate(pairs) if b and not a],
            "neither": [i for i, (a, b) in enumerate(pairs) if not a and not b]}


def length_stats(lengths: list[int], truncated: list[bool], quantiles=(0.1, 0.5, 0.9)) -> dict[str, float]:
    values = np.asarray(lengths, dtype=np.float64)
    stats = {"mean": float(values.mean()), "truncated_frac": float(np.mean(truncated))}
    stats.update({f"p{round(q * 100)}": float(np.quantile(values, q)) for q in quantiles})
    return stats


def expected_calibration_error(confidence: list[float], correct: list[bool], bins: int = 10) -> float:
    """ECE over equal-width confidence bins: sum over bins of (share of samples) x
    |accuracy - mean confidence|. Confidence 1.0 falls in the last bin."""
    conf = np.asarray(confidence, dtype=np.float64)
    hits = np.asarray(correct, dtype=np.float64)
    if len(conf) == 0:
        raise ValueError("no confidences")
    which = np.minimum((conf * bins).astype(int), bins - 1)
    ece = 0.0
    for b in range(bins):
        members = which == b
        if members.any():
            ece += members.mean() * abs(hits[members].mean() - conf[members].mean())
    return float(ece)


def brier_score(confidence: list[float], correct: list[bool]) -> float:
    conf = np.asarray(confidence, dtype=np.float64)
    return float(np.mean((conf - np.asarray(correct, dtype=np.float64)) ** 2))
