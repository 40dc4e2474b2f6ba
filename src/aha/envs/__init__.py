"""Multi-turn environments: the Environment interface (base.py), the built-ins (builtin.py)
and the rollout that plays episodes with an engine (episodes.py)."""

from aha.envs.base import EnvError, EnvFactory, Environment, Turn, check_turn
from aha.envs.builtin import BUILT_IN_ENVIRONMENTS, ToolUse, TryAgain, calculate
from aha.envs.episodes import Episode, EpisodeRunner, Episodes, TurnBridge, run_episodes

__all__ = ["BUILT_IN_ENVIRONMENTS", "EnvError", "EnvFactory", "Environment", "Episode", "EpisodeRunner", "Episodes",
           "ToolUse",
           "TryAgain", "Turn", "TurnBridge", "build_environment", "calculate", "check_turn", "run_episodes"]


def build_environment(env_config, reward, base_dir=".") -> EpisodeRunner | None:
    """What env_config (config.env) names, ready to play episodes; None when no environment
    is configured (single-turn completions)."""
    from aha.envs.base import environment_factory

    if env_config.name is None:
        return None
    make = environment_factory(env_config.name, reward, dict(env_config.options), BUILT_IN_ENVIRONMENTS, base_dir)
    return EpisodeRunner(env_config.name, make, env_config.max_turns)
