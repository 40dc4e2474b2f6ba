"""Rollout engines: sample completions and return exactly the tokens and log-probs sampled."""

from aha.rollout.engine import ENGINES, Engine, build_engine
from aha.rollout.hf_engine import HFEngine
from aha.rollout.rollouts import PartialRound, Rollouts

__all__ = ["ENGINES", "Engine", "HFEngine", "PartialRound", "Rollouts", "build_engine"]
