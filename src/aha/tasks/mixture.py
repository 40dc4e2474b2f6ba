"""Several tasks in one RL run (task.mixture): their samples in one Task, each tagged with its
task, and the sampler that draws a task by weight, then a prompt of that task.

Every sample records its task in a `task` field (the reward routes it to that task's reward
list, evaluation reports accuracy per task) and its id is `<task>/<id>`, unique across tasks.
The held-out samples are interleaved task by task, so eval.limit keeps a share of each."""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import zip_longest

from aha.algorithms.task_mixture import pick, scheduled_weights
from aha.config.mixture import TASK_FIELD, task_label
from aha.errors import TaskError
from aha.tasks.sampler import PromptSampler


def tagged(label: str, samples: Sequence[dict], where: str) -> list[dict]:
    """Copies of samples with their task and a task-prefixed id. A sample that already has a
    `task` field of its own is refused: the mixture would overwrite what a reward may read."""
    out = []
    for sample in samples:
        if TASK_FIELD in sample:
            raise TaskError(f"{where}: sample {sample.get('id')!r} has a field {TASK_FIELD!r} of its own, which "
                            "task.mixture sets to the sample's task: rename that field in the data")
        out.append({**sample, TASK_FIELD: label, "id": f"{label}/{sample['id']}"})
    return out


def interleaved(groups: list[list[dict]]) -> list[dict]:
    """The first of each group, then the second of each, ...: any prefix holds every group."""
    return [s for row in zip_longest(*groups) for s in row if s is not None]


class MixtureSampler:
    """Draws each prompt in two seeded steps: a task, by the mixture's weights at the current
    step (scheduled_weights), then that task's next prompt from its own PromptSampler (epochs
    of fresh permutations). Draw k's task comes from a generator seeded by (seed, k), so the
    whole state is the count of draws, the count of finished steps and each task's cursor:
    a checkpoint that holds them resumes the exact same draws.

    The weights are those of the step under way (steps finished + 1); a round sampled ahead
    (asynchronous RL) is drawn with the weights of the step it is sampled in."""

    def __init__(self, samples: Sequence[dict], labels: list[str], points: list[tuple[int, list[float]]],
                 blend: str, seed: int):
        self.labels, self.points, self.blend, self.seed = labels, points, blend, seed
        self.samplers = {label: PromptSampler([s for s in samples if s[TASK_FIELD] == label], f"{seed}:{label}")
                         for label in labels}
        self.step = 0  # steps finished
        self.draws = 0  # prompts drawn so far
        self.outcomes: list[dict] = []

    def weights(self) -> list[float]:
        return scheduled_weights(self.step + 1, self.points, self.blend)

    def next(self, n: int) -> list[dict]:
        weights, batch = self.weights(), []
        for _ in range(n):
            u = random.Random(f"{self.seed}:mixture:{self.draws}").random()
            self.draws += 1
            batch += self.samplers[self.labels[pick(weights, u)]].next(1)
        return batch

    def observe(self, samples: list[dict], right: list[int], group_size: int, step: int) -> None:
        """Each group's outcome for groups.jsonl, with its task and that task's epoch."""
        self.outcomes += [{"step": step, "epoch": self.samplers[s[TASK_FIELD]].epoch, "id": str(s["id"]),
                           "task": s[TASK_FIELD], "right": int(count), "tried": group_size}
                          for s, count in zip(samples, right)]

    def end_step(self) -> None:
        self.step += 1

    def stats(self) -> dict:
        """The weights the step was drawn with."""
        return {f"mixture/{label}/weight": w for label, w in zip(self.labels, scheduled_weights(
            self.step + 1, self.points, self.blend))}

    def state(self) -> dict:
        return {"step": self.step, "draws": self.draws,
                "tasks": {label: sampler.state() for label, sampler in self.samplers.items()}}

    def load_state(self, state: dict) -> None:
        if set(state.get("tasks", ())) != set(self.labels):
            raise TaskError(f"the checkpoint's sampler is not this mixture's: its tasks are "
                            f"{sorted(state.get('tasks', ()))}, task.mixture's {sorted(self.labels)}")
        self.step, self.draws = state["step"], state["draws"]
        for label, sampler in self.samplers.items():
            sampler.load_state(state["tasks"][label])


def mixture_sampler(task_section, samples: Sequence[dict], seed: int) -> MixtureSampler:
    """The sampler of a config's task section (aha.config.mixture.TaskSection)."""
    labels = [task_label(entry) for entry in task_section.mixture]
    points = [(0, [entry.weight for entry in task_section.mixture])]
    points = [p for p in points if not any(at.step == 0 for at in task_section.weights_schedule)]
    points += [(at.step, list(at.weights)) for at in task_section.weights_schedule]
    return MixtureSampler(samples, labels, points, task_section.weights_blend, seed)
