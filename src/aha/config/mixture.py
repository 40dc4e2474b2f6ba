"""task.mixture: several tasks in one RL run, each with its own reward list and held-out set
(ProRL's task suite, Guru's domains, Omni-Thinker's and JT-Math's stages). The task section
is TaskConfig plus the mixture keys; each entry of the mixture is a TaskConfig of its own
plus its label, weight and reward. The rules between these keys are here too."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from aha.config.sections import BUILT_IN_TASKS, RewardSpec, Strict, TaskConfig

# a mixture entry's TaskConfig keys that the whole run shares (set them on task, not on the entry)
SHARED_KEYS = ("system_prompt", "few_shot")
TASK_FIELD = "task"  # the field tasks/mixture.py sets on each sample: which task of the mixture it is


def task_field(sample: dict) -> dict:
    """{"task": ...} of a task mixture's sample (a record says which task its row is), else nothing."""
    return {TASK_FIELD: sample[TASK_FIELD]} if TASK_FIELD in sample else {}


class MixtureTask(TaskConfig):
    """One task of `task.mixture`: a built-in task (`name` and its knobs) or your data (`data`,
    `eval_data`), with its share of the prompts (`weight`) and its own reward list."""

    label: str | None = Field(None, description="the task's name in metrics (reward/<label>/..., "
                                                "eval/<label>/accuracy) and sample ids (<label>/<id>); default: name, "
                                                "else the data file's name")
    weight: float = Field(1.0, ge=0, description="the task's share of the prompts drawn (normalised over the mixture); "
                                                 "task.weights_schedule overrides it")
    reward: list[RewardSpec] | None = Field(None, description="this task's reward list; default: the run's reward if "
                                                              "the config sets one, else a built-in task's own "
                                                              "verifier, else numeric_answer")

    @model_validator(mode="after")
    def _own_keys(self):
        shared = changed(self, SHARED_KEYS)
        if shared:
            raise ValueError(f"{', '.join(shared)}: set on task (the whole mixture), not on one task of task.mixture")
        if self.stream:
            raise ValueError("stream: the tasks of a mixture are read into memory (task.stream does not work with "
                             "task.mixture yet)")
        label = task_label(self)
        if "/" in label or not label.strip():
            raise ValueError(f"label {label!r}: a task's label names metrics (reward/<label>/...): no '/', not empty")
        return self


class WeightsAt(Strict):
    """The mixture's weights from a step on (task.weights_schedule)."""

    step: int = Field(..., ge=0, description="the step these weights apply from (0: from the start)")
    weights: list[float] = Field(..., description="one weight per task of task.mixture, in its order (normalised)")


class TaskSection(TaskConfig):
    """A built-in task (`name`) or your data (`data`, `eval_data`, optionally named by `name`), or
    several of them in one run (`mixture`)."""

    mixture: list[MixtureTask] = Field(default_factory=list, description="several tasks in one RL run: [{name or data, "
            "eval_data, weight, reward, label, ...}], each a task section of its own (see 'A task of a mixture'); "
            "task.system_prompt and task.few_shot apply to all of them")
    weights_schedule: list[WeightsAt] = Field(default_factory=list, description="the mixture's weights by step: "
            "[{step, weights}], from each listed step on (replaces each task's weight)")
    weights_blend: Literal["step", "linear"] = Field("step", description="between two steps of task.weights_schedule: "
            "step keeps the earlier weights until the later step; linear moves from one to the other step by step")


def task_label(task: TaskConfig) -> str:
    """The name a task of a mixture goes by: its label, else its name, else its data file's stem,
    else arithmetic (a task with neither name nor data is arithmetic)."""
    if getattr(task, "label", None):
        return task.label
    if task.name:
        return task.name
    return Path(task.data).stem if task.data else "arithmetic"


def fill_mixture_rewards(config) -> None:
    """Each task of the mixture without its own reward list gets the run's reward (when the
    config sets one), else its built-in verifier, else the run's default reward."""
    for entry in config.task.mixture:
        if entry.reward is not None:
            continue
        if "reward" not in config.model_fields_set and entry.data is None and entry.name in BUILT_IN_TASKS:
            entry.reward = [RewardSpec(fn=BUILT_IN_TASKS[entry.name])]
        else:
            entry.reward = [spec.model_copy() for spec in config.reward]
        entry.model_fields_set.discard("reward")  # derived, not given (see Config._task_reward)


def changed(section, keys) -> list[str]:
    """The keys set in section to other than their defaults: a config.yaml (dump_config) holds every
    key, at its default where the user set none."""
    fields = type(section).model_fields
    return [key for key in keys if key in section.model_fields_set
            and getattr(section, key) != fields[key].get_default(call_default_factory=True)]


# keys of the task section that a mixture leaves to its entries
ENTRY_ONLY = [key for key in TaskConfig.model_fields if key not in (*SHARED_KEYS, "stream")]
# what a mixture does not work with yet: (key, is it set, why)
NOT_WITH_A_MIXTURE = [
    ("curriculum.filter / curriculum.weighting / curriculum.difficulty_max",
     lambda c: bool(c.curriculum.filter) or c.curriculum.weighting != "uniform" or c.curriculum.difficulty_max,
     "the mixture's sampler draws by task weight"),
    ("task.stream", lambda c: c.task.stream, "the tasks of a mixture are read into memory"),
    ("monitor.gold", lambda c: bool(c.monitor.gold), "the gold reward would score every task's rows with one list"),
    ("reward[i].online", lambda c: any(s.online for s in c.reward) or any(s.online for e in c.task.mixture
                                                                            for s in e.reward or ()),
     "a reward model that learns is one reward for every row"),
    ("referee.verifier", lambda c: c.referee.verifier is not None, "the referee's verifier is one for every row"),
    ("eval.scorer=reward.<component>", lambda c: c.eval.scorer.startswith("reward."),
     "one component would score every task's held-out rows; eval.scorer=reward scores each with its own task's"),
]


def mixture_problems(config) -> list[str]:
    """What is wrong with task.mixture in this config (nothing when it is empty)."""
    task = config.task
    if not getattr(task, "mixture", None):
        return [f"task.{key} is read with task.mixture only" for key in ("weights_schedule",)
                if getattr(task, key, None)]
    problems = []
    if config.method != "rl":
        problems.append(f"task.mixture trains several tasks by online RL: method=rl only (method is {config.method})")
    top = changed(task, ENTRY_ONLY)
    if top:
        problems.append(f"task.{', task.'.join(top)}: with task.mixture, set these on each task of the mixture "
                        "(task.mixture[i].<key>)")
    labels = [task_label(entry) for entry in task.mixture]
    for i, label in enumerate(labels):
        if label in labels[:i]:
            problems.append(f"task.mixture[{i}]: a second task named {label!r}; give one a label (task.mixture[{i}]"
                            ".label)")
    weights = [[e.weight for e in task.mixture]] + [at.weights for at in task.weights_schedule]
    where = ["task.mixture[i].weight"] + [f"task.weights_schedule[{i}].weights" for i in range(len(weights) - 1)]
    for key, row in zip(where, weights):
        if len(row) != len(task.mixture):
            problems.append(f"{key}: {len(row)} weights for {len(task.mixture)} tasks of task.mixture")
        elif any(w < 0 for w in row) or sum(row) <= 0:
            problems.append(f"{key}: weights must be >= 0 with a positive sum, got {row}")
    steps = [at.step for at in task.weights_schedule]
    if any(b <= a for a, b in zip(steps, steps[1:])):
        problems.append(f"task.weights_schedule: its steps must increase, got {steps}")
    problems += [f"{key} does not work with task.mixture yet ({why})" for key, when, why in NOT_WITH_A_MIXTURE
                 if when(config)]
    return problems
