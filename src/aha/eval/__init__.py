"""Evaluation: greedy held-out accuracy, and estimators of what n samples per problem say
(pass@k, voting, best-of-N, coverage, length, calibration: aha.eval.estimators)."""

from aha.eval.runner import EvalResult, evaluate

__all__ = ["EvalResult", "evaluate"]
