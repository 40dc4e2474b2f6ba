"""Rollout engines: sample completions and return exactly the tokens and log-probs sampled."""

from aha.rollout.hf_engine import HFEngine, Rollouts

__all__ = ["HFEngine", "Rollouts"]
