"""The reward of a task mixture (task.mixture): each task's own reward list, and each row scored
by its own task's list only (the sample's `task` field says which), never by another's.

Components are named `<task>/<component>` (metrics reward/<task>/<component>, failures
reward_failed/<task>/<component>, and a failing reward's log line and the run's alarms name
its task). A component holds NaN on the rows of other tasks: not applicable there, and left
out of its mean (the step statistics average finite values only)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from aha.config import RayConfig
from aha.config.mixture import TASK_FIELD, MixtureTask, task_label
from aha.rewards.compose import Component, CompositeReward, RewardResult, build_reward
from aha.rewards.functions import RewardError

if TYPE_CHECKING:
    import torch

class MixtureReward:
    """{task: CompositeReward}; score() sends each task's rows to its own composite."""

    def __init__(self, rewards: dict[str, CompositeReward]):
        self.rewards = rewards
        for label, reward in rewards.items():  # its log lines, failures and metrics name the task
            for comp in reward.components:
                comp.name = f"{label}/{comp.name}"

    @property
    def components(self) -> list[Component]:
        return [comp for reward in self.rewards.values() for comp in reward.components]

    def components_for(self, sample: dict) -> list[Component]:
        """The components that score this sample: its task's."""
        return self._route(sample).components

    @property
    def first_errors(self) -> dict[str, str]:
        return {name: error for reward in self.rewards.values() for name, error in reward.first_errors.items()}

    def _route(self, sample: dict) -> CompositeReward:
        label = sample.get(TASK_FIELD)
        if label not in self.rewards:
            raise RewardError(f"sample {sample.get('id', '?')!r} has task {label!r}, not one of task.mixture's "
                              f"({', '.join(self.rewards)}): each row is scored by its own task's reward")
        return self.rewards[label]

    def score(self, completions: list[str], samples: list[dict],
              completion_tokens: list[int] | None = None) -> RewardResult:
        import torch

        n = len(completions)
        rows: dict[str, list[int]] = {}
        for i, sample in enumerate(samples):
            self._route(sample)
            rows.setdefault(sample[TASK_FIELD], []).append(i)
        total, failed = torch.zeros(n), torch.zeros(n, dtype=torch.bool)
        components: dict[str, torch.Tensor] = {}
        failures: Counter = Counter()
        steps: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        stepped = False
        for label in (label for label in self.rewards if label in rows):  # the mixture's order: stable metric keys
            mine = rows[label]
            result = self.rewards[label].score([completions[i] for i in mine], [samples[i] for i in mine],
                                               None if completion_tokens is None else
                                               [completion_tokens[i] for i in mine])
            index = torch.tensor(mine)
            total[index], failed[index] = result.total, result.failed
            for name, values in result.components.items():
                components.setdefault(name, torch.full((n,), float("nan")))[index] = values
            failures.update(result.failures)
            if result.steps is not None:
                stepped = True
                for j, i in enumerate(mine):
                    steps[i] = result.steps[j]
        return RewardResult(total, components, failed, dict(failures), steps if stepped else None)

    def formula(self) -> str:
        return "; ".join(f"{label}: {reward.formula()}" for label, reward in self.rewards.items())

    def close(self) -> None:
        for reward in self.rewards.values():
            reward.close()


def build_mixture_reward(mixture: list[MixtureTask], base_dir: str | Path = ".", dtype: str = "auto",
                         ray: RayConfig | None = None, device: str = "auto") -> MixtureReward:
    """Each task's reward list (the config has filled in the defaults), errors naming
    task.mixture[i].reward[j]; what was built is closed if a later list fails."""
    rewards: dict[str, CompositeReward] = {}
    try:
        for i, entry in enumerate(mixture):
            rewards[task_label(entry)] = build_reward(entry.reward, base_dir, section=f"task.mixture[{i}].reward",
                                                      dtype=dtype, ray=ray, device=device)
    except BaseException:
        for reward in rewards.values():
            reward.close()
        raise
    return MixtureReward(rewards)
