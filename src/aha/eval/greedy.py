"""Greedy held-out accuracy of a config's model, of it with a checkpoint's weights, or of another
model or checkpoint folder: what `aha eval` prints and aha.evaluate returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aha.config import Config
from aha.eval.runner import EvalResult, evaluate
from aha.eval.scoring import build_scorer, held_out_name
from aha.eval.study import load_for_eval
from aha.models import load
from aha.models.checkpoints import load_weights
from aha.models.compute import placement
from aha.rollout import build_engine
from aha.tasks import build_task


@dataclass
class HeldOut:
    result: EvalResult
    source: str  # the model evaluated: the checkpoint, the --model given, or the config's model
    held_out: str  # what the held-out problems are called
    right: str  # what counts as right (the scorer)


def greedy_held_out(config: Config, checkpoint: str | None = None, model: str | None = None) -> HeldOut:
    """The held-out problems of config's task, answered greedily and scored by config's scorer."""
    task = build_task(config.task, config.base_dir)
    scorer = build_scorer(config)  # before the model loads: a bad eval.scorer fails in a second
    env_reward = env = None
    try:
        if config.env.name is not None:  # multi-turn episodes: the environment judges with the run's reward
            from aha.envs import build_environment
            from aha.rewards import build_reward

            env_reward = build_reward(config.reward, config.base_dir, dtype=config.train.dtype)
            env = build_environment(config.env, env_reward, config.base_dir)
        loaded = load_for_eval(model, config) if model else load(config.model, seed=config.seed)
        if checkpoint:
            load_weights(loaded.model, Path(checkpoint))
        device, dtype = placement(config.device, config.train.dtype)
        engine = build_engine(config.rollout, loaded.model.to(device), loaded.tokenizer, dtype, seed=config.seed)
        try:
            result = evaluate(engine, task, scorer, config.eval.limit, config.eval.max_new_tokens, env=env)
        finally:
            engine.close()
    finally:
        scorer.close()
        if env_reward is not None:
            env_reward.close()
    return HeldOut(result, str(checkpoint or model or loaded.name), held_out_name(config, task.name), scorer.describe)
