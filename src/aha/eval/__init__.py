"""Evaluation: greedy held-out accuracy, and estimators of what n samples per problem say
(pass@k, voting, best-of-N, coverage, length, calibration: aha.eval.estimators)."""

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
from aha.eval.runner import EvalResult, evaluate, evaluate_episodes

__all__ = [
    "EvalResult", "best_of_k", "bootstrap_ci", "brier_score", "coverage", "evaluate", "evaluate_episodes",
           "expected_calibration_error",
    "ks_up_to", "length_stats", "pass_at_k", "pass_at_k_table", "vote_at_k",
]
