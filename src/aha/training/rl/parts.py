"""The wiring of an RL step (StepParts) and what a step changes besides the weights (RLState)."""

from __future__ import annotations

from dataclasses import dataclass

from aha.config import Config
from aha.envs import EpisodeRunner
from aha.rewards import CompositeReward
from aha.rollout import Engine
from aha.tasks import PromptSampler, Task
from aha.training.monitor import HackingMonitor
from aha.training.rl.guidance import Guidance
from aha.training.rl.length import LengthShaping
from aha.training.rl.likelihood import LikelihoodReward
from aha.training.rl.online_rm import OnlineRM
from aha.training.rl.partial import PartialRollouts
from aha.training.rl.referee import Referee
from aha.training.rl.replay import ReplayBuffer
from aha.training.rl.update import Learner, Shape


@dataclass(frozen=True)
class StepParts:
    """The wiring of an RL step, fixed for the run (the sampler, replay buffer and learner
    hold their own state, saved by the checkpoint through their own methods)."""

    config: Config
    engine: Engine
    task: Task
    sampler: PromptSampler
    reward: CompositeReward
    learner: Learner
    shape: Shape
    replay: ReplayBuffer | None
    partial: PartialRollouts | None = None  # the groups carried between rounds (partial rollouts)
    env: EpisodeRunner | None = None  # multi-turn episodes (config.env)
    length: LengthShaping | None = None  # LASER-D targets, A-DLP per prompt (None: neither is on)
    online_rm: OnlineRM | None = None  # a reward model that learns during RL (reward[i].online)
    referee: Referee | None = None  # the policy as its own referee (URPO, config.referee)
    likelihood: LikelihoodReward | None = None  # VeriFree: the policy's likelihood of the reference answer
    guidance: Guidance | None = None  # ExPO's answer-shown retries for unsolved groups (algorithm.guidance)


@dataclass
class RLState:
    """What an RL step changes besides weights, optimizers, data cursor and replay buffer:
    the length penalty's coefficient (adaptive: checkpointed) and the hacking monitor
    (rebuilt on resume from the metrics, which hold all its series)."""

    length_coef: float = 0.0
    monitor: HackingMonitor | None = None
