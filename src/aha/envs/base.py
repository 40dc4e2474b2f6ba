"""The environment seam: an episode is a conversation between the policy and an environment.

reset(sample) gives the episode's first prompt; then, turn by turn, the policy writes an
action (its completion, as text) and step(action) answers with a Turn: a reward, whether the
episode is over, and otherwise an observation the policy reads next (as the next user
message). The rollout (envs/episodes.py) keeps the exact tokens of both sides; the learner
trains on the policy's tokens only.

An environment class is made once per episode as Class(reward, **env.options): reward is
the run's reward (a CompositeReward: reward.score(texts, samples)), which an environment may
use to judge answers or ignore."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from aha.rewards.functions import resolve_function


class EnvError(ValueError):
    """An environment that cannot be built as configured, or that broke its contract."""


ROLES = ("user", "tool")  # who speaks an observation


@dataclass(frozen=True)
class Turn:
    """The environment's answer to one policy turn."""

    reward: float  # paid at the turn's last token; an episode's return is the sum over its turns
    done: bool  # the episode ends here (it also ends after env.max_turns policy turns)
    observation: str = ""  # what the policy reads next, as the next user message (unused when done)
    # numbers about the turn (e.g. correct: 1.0), logged for an episode's first and final turn
    info: dict[str, float] = field(default_factory=dict)
    # "tool": the observation is a tool's result, written in the template's tool message where
    # it has one (envs/episodes.py: TurnBridge), else as a user message like any other
    role: str = "user"


class Environment(Protocol):
    def reset(self, sample: dict) -> str | list[dict]:
        """The episode's first prompt for this task sample: a string or chat messages (the
        task's system prompt and few-shot turns are added as for any prompt)."""
        ...

    def step(self, action: str) -> Turn:
        """The policy's turn (its decoded completion) -> reward, done, the next observation."""
        ...


EnvFactory = Callable[[], Environment]


def check_turn(turn, name: str) -> Turn:
    """turn, if it keeps the contract; else an error naming the environment and what is wrong."""
    if not isinstance(turn, Turn):
        raise EnvError(f"environment {name}: step() must return an aha.envs.Turn, got {type(turn).__name__}")
    if not isinstance(turn.reward, (int, float)) or isinstance(turn.reward, bool):
        raise EnvError(f"environment {name}: Turn.reward must be a number, got {turn.reward!r}")
    if not isinstance(turn.observation, str):
        raise EnvError(f"environment {name}: Turn.observation must be a string, got {type(turn.observation).__name__}")
    if turn.role not in ROLES:
        raise EnvError(f"environment {name}: Turn.role must be one of {', '.join(ROLES)}, got {turn.role!r}")
    for key, value in turn.info.items():
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise EnvError(f"environment {name}: Turn.info[{key!r}] must be a finite number, got {value!r}")
    return turn


def environment_factory(name: str, reward, options: dict, built_in: dict, base_dir=".") -> EnvFactory:
    """A function that makes a fresh environment for an episode: a built-in name or
    "module:Class" / "file.py:Class"; options that the class does not take are an error now.
    A class whose constructor takes base_dir is given the config's folder there."""
    cls = built_in.get(name) or resolve_function(name, key="env.name", base_dir=base_dir)
    if "base_dir" in inspect.signature(cls).parameters and "base_dir" not in options:
        options = {**options, "base_dir": str(base_dir)}  # a class that takes it reads paths from the config's folder
    try:
        inspect.signature(cls).bind(reward, **options)
    except TypeError as err:
        raise EnvError(f"env.options: {err} (environment {name}: {inspect.signature(cls)})") from None
    try:  # one made now: a value the class refuses is an error before anything loads, not at the first step
        cls(reward, **options)
    except Exception as err:  # noqa: BLE001 - whatever the user's class raises, named
        raise EnvError(f"env.options: environment {name} refused them: {type(err).__name__}: {err}") from None
    return lambda: cls(reward, **options)
