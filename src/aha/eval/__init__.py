"""Evaluation: greedy held-out accuracy (pass@k and friends come later)."""

from aha.eval.runner import EvalResult, evaluate

__all__ = ["EvalResult", "evaluate"]
