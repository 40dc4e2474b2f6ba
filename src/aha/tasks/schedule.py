"""A difficulty schedule for a procedural task (curriculum.difficulty_max): the run trains on
one level's problems at a time, from task.difficulty up, and moves to the next level once
the policy gets enough of the current one right. The held-out problems stay where they are
(task.eval_difficulty, default task.difficulty), so evaluation measures one fixed thing.

And the choice of sampler for an RL run, from the curriculum section."""

from __future__ import annotations

from collections.abc import Sequence

from aha.config import Config
from aha.tasks.curriculum import CurriculumSampler
from aha.tasks.mixture import MixtureSampler, mixture_sampler
from aha.tasks.procedural import procedural_train
from aha.tasks.sampler import PromptSampler


class DifficultySchedule(CurriculumSampler):
    """A CurriculumSampler (filter and weighting work as there) over one level's training
    problems at a time. After each step, if the accuracy (right / sampled, every group of the
    step) over the level's last `window` steps has reached `threshold`, the next level's
    problems replace the current ones: the next draw opens a new epoch over them, and the
    window starts empty (what the policy got right at the old level says nothing of the new).
    A prompt's counts (filter, weighting) are kept by id, and ids differ between levels."""

    def __init__(self, levels: dict[int, list[dict]], seed: int, threshold: float, window: int, **curriculum):
        self.levels, self.level = levels, min(levels)
        super().__init__(levels[self.level], seed, **curriculum)
        self.threshold, self.window = threshold, window
        self.history: list[list[int]] = []  # [right, sampled] of the level's steps, the latest last
        self.current = [0, 0]  # the same for the step under way

    def observe(self, samples: list[dict], right: list[int], group_size: int, step: int) -> None:
        super().observe(samples, right, group_size, step)
        self.current = [self.current[0] + sum(right), self.current[1] + group_size * len(right)]

    def _window(self) -> list[list[int]]:
        """The level's last `window` steps, the one under way included (it has been observed
        when a step logs its stats and when it ends)."""
        return (self.history + ([self.current] if self.current[1] else []))[-self.window:]

    def window_accuracy(self) -> float:
        steps = self._window()
        sampled = sum(s[1] for s in steps)
        return sum(s[0] for s in steps) / sampled if sampled else 0.0

    def end_step(self) -> None:
        full = len(self._window()) == self.window
        rise = full and self.window_accuracy() >= self.threshold and self.level < max(self.levels)
        self.history, self.current = self._window(), [0, 0]
        if rise:
            self.level += 1
            self.history = []
            self.samples = self.levels[self.level]
            self._order = self._permutation(self.epoch)
            self.position = len(self._order)  # epoch done: the next draw starts one over the new level

    def stats(self) -> dict:
        return {**super().stats(), "curriculum/difficulty": self.level,
                "curriculum/window_accuracy": self.window_accuracy()}

    def state(self) -> dict:
        # saved between steps, when the step under way has been folded into the history
        return {**super().state(), "level": self.level, "history": self.history}

    def load_state(self, state: dict) -> None:
        self.level = state["level"]
        self.samples = self.levels[self.level]  # before the epoch order is rebuilt over them
        super().load_state(state)
        self.history, self.current = [list(s) for s in state["history"]], [0, 0]


def build_sampler(config: Config, train: Sequence[dict]) -> PromptSampler | MixtureSampler:
    """The RL run's prompt sampler: a task mixture's, epoch order, a curriculum, or a difficulty schedule whose
    first level is `train` (the task's training problems at task.difficulty)."""
    if config.task.mixture:  # a task by weight, then its next prompt (the config refuses curricula with it)
        return mixture_sampler(config.task, train, config.seed)
    cur = config.curriculum
    options = dict(filter=cur.filter, retest_after=cur.retest_after, filter_after=cur.filter_after,
                   weighting=cur.weighting, floor=cur.floor, target_p=cur.target_p, target_width=cur.target_width,
                   prior=cur.prior)
    if cur.difficulty_max is not None:
        start = config.task.difficulty
        levels = {start: list(train), **{d: procedural_train(config.task, d)
                                         for d in range(start + 1, cur.difficulty_max + 1)}}
        return DifficultySchedule(levels, config.seed, cur.difficulty_threshold, cur.difficulty_window, **options)
    if cur.filter or cur.weighting != "uniform":
        return CurriculumSampler(train, config.seed, **options)
    return PromptSampler(train, config.seed)
