"""Which prompts RL spends its rollouts on (config section `curriculum`): online difficulty
filtering and a curriculum toward the prompts whose groups have reward variance. Both learn
from each group's outcome (observe) and keep all they learned in their state, which the
checkpoint saves.

A group whose samples are all right or all wrong has no advantage (GRPO's baseline is its
mean), so its rollouts teach nothing; dynamic sampling throws such groups away after paying
for them. Here a prompt that gave such a group is set aside for `retest_after` steps
(filtering), and prompts are drawn in proportion to p (1 - p), the variance of their
estimated success rate p (weighting)."""

from __future__ import annotations

import random

from aha.tasks.sampler import PromptSampler


class CurriculumSampler(PromptSampler):
    """PromptSampler that passes over prompts set aside (filter) or draws by p (1 - p)
    (weighting "variance", without replacement within a draw). p = (right + 1) / (tried + 2)
    over a prompt's samples so far: 1/2 for a prompt never tried. A prompt right or wrong in
    every sample of its latest group sits out its next `retest_after` turns: the next times
    epoch-order sampling comes to it (one a epoch), or the next weighted draws."""

    def __init__(self, samples: list[dict], seed: int, filter: bool = False, retest_after: int = 2,
                 weighting: str = "uniform", floor: float = 0.05):
        super().__init__(samples, seed)
        self.filter, self.retest_after, self.weighting, self.floor = filter, retest_after, weighting, floor
        self.records: dict[str, list[int]] = {}  # id -> [right, tried, turns still to sit out]
        self.draws = 0  # weighted draws so far (each seeds its own generator: resumable)
        self.skipped = 0  # turns prompts sat out, over the run

    def _aside(self, sample: dict) -> bool:
        record = self.records.get(str(sample["id"]))
        return self.filter and record is not None and record[2] > 0

    def _sit_out(self, sample: dict) -> None:
        self.records[str(sample["id"])][2] -= 1
        self.skipped += 1

    def _rate(self, sample: dict) -> float:
        right, tried, _ = self.records.get(str(sample["id"]), (0, 0, 0))
        return (right + 1) / (tried + 2)

    def next(self, n: int) -> list[dict]:
        if self.weighting == "variance":
            return self._weighted(n)
        batch, passed = [], 0
        while len(batch) < n:
            sample = super().next(1)[0]
            # set aside: passed over, unless a whole epoch is set aside (then it is drawn anyway)
            if self._aside(sample) and passed < len(self.samples):
                passed += 1
                self._sit_out(sample)
                continue
            batch.append(sample)
        return batch

    def _weighted(self, n: int) -> list[dict]:
        rng = random.Random(f"{self.seed}:curriculum:{self.draws}")
        self.draws += 1
        pool = [s for s in self.samples if not self._aside(s)] or list(self.samples)
        if len(pool) < len(self.samples):
            for sample in self.samples:
                if self._aside(sample):
                    self._sit_out(sample)
        rates = [self._rate(s) for s in pool]
        weights = [p * (1 - p) + self.floor for p in rates]
        chosen = []
        for _ in range(min(n, len(pool))):  # without replacement: a step asks for distinct prompts
            i = rng.choices(range(len(pool)), weights)[0]
            chosen.append(pool.pop(i))
            weights.pop(i)
        while len(chosen) < n:  # more asked than there are prompts: draw again from all
            chosen.append(rng.choice(self.samples))
        return chosen

    def observe(self, samples: list[dict], right: list[int], group_size: int, step: int) -> None:
        """Each sample's group at `step`: how many of its group_size samples were right."""
        super().observe(samples, right, group_size, step)
        for sample, count in zip(samples, right):
            record = self.records.setdefault(str(sample["id"]), [0, 0, 0])
            record[0] += count
            record[1] += group_size
            if count in (0, group_size):  # no variance: nothing to learn from it for a while
                record[2] = self.retest_after

    def stats(self) -> dict:
        tried = [r for r in self.records.values() if r[1]]
        return {"curriculum/set_aside": sum(1 for s in self.samples if self._aside(s)),
                "curriculum/skipped": self.skipped,
                "curriculum/seen": len(tried)}

    def state(self) -> dict:
        return {**super().state(), "records": self.records, "draws": self.draws, "skipped": self.skipped}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.records = {k: list(v) for k, v in state.get("records", {}).items()}
        self.draws, self.skipped = state.get("draws", 0), state.get("skipped", 0)
