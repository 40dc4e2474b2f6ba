"""Rollout engines: sample completions and return exactly the tokens and log-probs sampled."""

from aha.rollout.engine import ENGINES, Engine, build_engine
from aha.rollout.hf_engine import HFEngine
from aha.rollout.rollouts import Rollouts

__all__ = ["ENGINES", "Engine", "HFEngine", "Rollouts", "build_engine"]
