"""Seeded, resumable iteration over training samples: epochs of fresh permutations."""

from __future__ import annotations

import random


class PromptSampler:
    """Yields training samples without replacement within an epoch.

    Its whole state is (epoch, position); the permutation of an epoch is a function of
    (seed, epoch), so a checkpoint that stores the state resumes the exact same order."""

    def __init__(self, samples: list[dict], seed: int):
        self.samples = samples
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)
        self.outcomes: list[dict] = []

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(len(self.samples)))
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        return order

    def next(self, n: int) -> list[dict]:
        batch = []
        while len(batch) < n:
            if self.position == len(self._order):
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            batch.append(self.samples[self._order[self.position]])
            self.position += 1
        return batch

    def observe(self, samples: list[dict], right: list[int], group_size: int, step: int) -> None:
        """How the samples' groups did: kept in `outcomes` until the run writes them down
        (groups.jsonl); a curriculum also learns from them."""
        self.outcomes += [{"step": step, "epoch": self.epoch, "id": str(sample["id"]), "right": int(count),
                           "tried": group_size} for sample, count in zip(samples, right)]

    def end_step(self) -> None:
        """The step's groups are all observed (a difficulty schedule decides here)."""

    def stats(self) -> dict:
        return {}

    def state(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state(self, state: dict) -> None:
        self.epoch = state["epoch"]
        self.position = state["position"]
        self._order = self._permutation(self.epoch)
