"""Rollout engines: sample completions and return exactly the tokens and log-probs sampled."""

from aha.rollout.hf_engine import HFEngine
from aha.rollout.rollouts import Rollouts

__all__ = ["HFEngine", "Rollouts"]
