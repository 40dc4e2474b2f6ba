"""What every training method plugs into the loop (training/loop.py): the fixed wiring it is
given (Setup) and the hooks it implements (Method). A method is one step function over its
own batch type plus the state a checkpoint must hold to resume it exactly."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from aha.config import Config
from aha.envs import EpisodeRunner
from aha.eval.scoring import Scorer
from aha.rewards import CompositeReward
from aha.rollout import Engine
from aha.tasks import Task
from aha.training.phases import Phases
from aha.training.shards import Shards


@dataclass(frozen=True)
class Setup:
    """Built once by the loop, the same for every method, never changed during the run."""

    config: Config
    run_path: Path
    task: Task  # its held-out split is what every method is evaluated on
    reward: CompositeReward  # the run's reward (rl trains on it; every method's default held-out scorer)
    scorer: Scorer
    model: torch.nn.Module  # the policy being trained
    tokenizer: object
    engine: Engine  # greedy held-out evaluation (and rl's rollouts)
    dtype: torch.dtype
    env: EpisodeRunner | None = None  # config.env: rl plays multi-turn episodes, and is evaluated on them
    # learner ranks (distributed.processes): what each method places over them, with rank 0's whole copies
    shards: Shards = field(default_factory=Shards)
    # rank 0's whole copy of the policy: the engine samples it, checkpoints save it (the model itself on
    # one process; None on the other ranks). Method.__init__ places `model` with shards.place("model", ...)
    whole: torch.nn.Module | None = None

    def __post_init__(self):
        if self.whole is None and not self.shards.ranks.distributed:
            object.__setattr__(self, "whole", self.model)  # one process: the policy is its own whole copy

    @property
    def step_micro_batch(self) -> int:
        """The rows of each gradient pass over all learner ranks: train.micro_batch_size on each rank
        (one process: train.micro_batch_size). Each such micro-batch is split over the ranks
        (rank_passes), so every rank computes the micro-batches one process would."""
        return self.config.train.micro_batch_size * self.shards.ranks.world_size

    @property
    def device(self) -> torch.device:
        """Where this rank's models run (config.device, resolved); its data stays on the CPU."""
        return self.shards.ranks.device

    @property
    def is_main(self) -> bool:
        """Rank 0 (one process is rank 0): it alone samples, scores and writes the run folder."""
        return self.shards.ranks.is_main


def set_hyperparameters(optimizer: torch.optim.Optimizer, lr: float, betas, weight_decay: float) -> None:
    for group in optimizer.param_groups:
        group.update(lr=lr, betas=betas, weight_decay=weight_decay)


class Method:
    """The hooks the loop calls. Subclasses set `modules` and `optimizers` (what a checkpoint
    holds: "model" is the policy, saved as a loadable model folder) in __init__."""

    modules: dict[str, torch.nn.Module]
    optimizers: dict[str, torch.optim.Optimizer]
    setup: Setup
    # False for a method whose model writes no answers (a reward model): the loop then skips
    # its greedy held-out generation and logs only held_out()'s metrics
    generates: bool = True

    @classmethod
    def prepare(cls, config: Config, task: Task, reward: CompositeReward):
        """Read and check what the method needs from files and config before the slow model
        load, so bad input fails in a second; the result goes to __init__(setup, prepared).
        It may hold processes: a `close()` on it is called when the run ends."""
        return None

    def step(self, step: int, phases: Phases) -> tuple[dict, list[dict]]:
        """One optimizer step: its metrics record ({"step": step, ...}) and example records
        for samples.jsonl. Its parts run inside named phases (`with phases("update"): ...`),
        which the loop records as time/<phase>_s beside the step's time/step_s."""
        raise NotImplementedError

    def state(self) -> dict:
        """JSON-serialisable state that changes during the run (data cursor, controllers)."""
        return {}

    def extra_state(self) -> dict | None:
        """Picklable state too large or too rich for JSON (a replay buffer)."""
        return None

    def restore(self, state: dict, extra: dict, metrics: list[dict]) -> None:
        """Back to the state a checkpoint saved; metrics are the run's records up to it."""

    def checkpoint_files(self) -> dict[str, str]:
        """name -> text of small files each checkpoint folder also holds, for whoever loads
        it later (a reward model's reward_model.json says how it scores)."""
        return {}

    def apply_hyperparameters(self) -> None:
        """After a resume with train.allow_config_change: the config's optimizer settings
        replace the ones load_state_dict brought back (a method whose optimizers have settings
        of their own, like rl's critic, overrides this)."""
        train = self.config.train
        for optimizer in self.optimizers.values():
            set_hyperparameters(optimizer, train.lr, train.betas, train.weight_decay)

    def held_out(self, step: int) -> dict:
        """Held-out metrics of this method's own (e.g. preference accuracy on held-out pairs),
        logged with the greedy accuracy the loop measures."""
        return {}

    def after_step(self, record: dict, echo) -> None:
        """After the step's record is logged (alarms that may stop the run, monitor files)."""

    def postfix(self, record: dict) -> dict:
        """The few numbers the progress bar shows."""
        return {}

    def finish(self, echo) -> None:
        """At the end of training, before the final held-out evaluation: summaries."""

    def close(self) -> None:
        """Release processes or files the method opened."""

    @property
    def config(self) -> Config:
        return self.setup.config


class CursorMethod(Method):
    """A method over a fixed dataset whose only changing state (besides weights and
    optimizer) is its place in the data: `self.sampler`, a PromptSampler."""

    sampler: object

    def state(self) -> dict:
        return {"sampler": self.sampler.state()}

    def restore(self, state: dict, extra: dict, metrics: list[dict]) -> None:
        self.sampler.load_state(state["sampler"])
