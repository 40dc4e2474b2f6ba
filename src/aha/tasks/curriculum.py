"""Which prompts RL spends its rollouts on (config section `curriculum`): online difficulty
filtering and curricula toward the prompts worth drawing (weighting). Both learn from each
group's outcome (observe) and keep all they learned in their state, which the checkpoint
saves.

A group whose samples are all right or all wrong has no advantage (GRPO's baseline is its
mean), so its rollouts teach nothing; dynamic sampling throws such groups away after paying
for them. Here a prompt that gave `filter_after` such groups in a row is set aside for
`retest_after` turns (filtering), and prompts are drawn in proportion to a weighting of
their estimated pass rate p (algorithms/prompt_weights.py): p (1 - p), its variance
(weighting "variance"), or a kernel around a pass rate aimed at (weighting "target")."""

from __future__ import annotations

import random

from aha.algorithms.prompt_weights import PROMPT_WEIGHTINGS, pass_rate
from aha.tasks.sampler import PromptSampler


class CurriculumSampler(PromptSampler):
    """PromptSampler that passes over prompts set aside (filter) or draws by a weighting of p
    plus a floor (weighting "variance" or "target", without replacement within a draw).
    p is the posterior mean of a prompt's samples so far (algorithms/prompt_weights.py): with
    prior "flat" (right + 1) / (tried + 2), 1/2 for a prompt never tried; with prior "pool"
    the untried prompt's p is the pass rate of the pool's samples so far. A prompt right or
    wrong in every sample of its latest `filter_after` groups sits out its next
    `retest_after` turns: the next times epoch-order sampling comes to it (one an epoch), or
    the next weighted draws; its count of such groups starts again after that."""

    def __init__(self, samples: list[dict], seed: int, filter: bool = False, retest_after: int = 2,
                 weighting: str = "uniform", floor: float = 0.05, target_p: float | None = None,
                 target_width: float = 0.15, prior: str = "flat", filter_after: int = 1):
        super().__init__(samples, seed)
        if weighting == "target" and target_p is None:
            raise ValueError("weighting 'target' needs target_p")
        self.filter, self.retest_after, self.weighting, self.floor = filter, retest_after, weighting, floor
        self.target_p, self.target_width, self.prior, self.filter_after = target_p, target_width, prior, filter_after
        # id -> [right, tried, turns still to sit out, saturated groups in a row]
        self.records: dict[str, list[int]] = {}
        self.draws = 0  # weighted draws so far (each seeds its own generator: resumable)
        self.skipped = 0  # turns prompts sat out, over the run

    def _aside(self, sample: dict) -> bool:
        record = self.records.get(str(sample["id"]))
        return self.filter and record is not None and record[2] > 0

    def _sit_out(self, sample: dict) -> None:
        self.records[str(sample["id"])][2] -= 1
        self.skipped += 1

    def prior_mean(self) -> float:
        """What p is for a prompt never tried: 1/2 (flat), or the pass rate of all samples of
        the prompts now drawn from (pool), itself with Laplace's rule (1/2 before any)."""
        if self.prior == "flat":
            return 0.5
        right = tried = 0
        for sample in self.samples:
            record = self.records.get(str(sample["id"]))
            if record is not None:
                right, tried = right + record[0], tried + record[1]
        return pass_rate(right, tried)

    def estimate(self, sample: dict, prior_mean: float = 0.5) -> float:
        right, tried = self.records.get(str(sample["id"]), (0, 0))[:2]
        return pass_rate(right, tried, prior_mean)

    def next(self, n: int) -> list[dict]:
        if self.weighting != "uniform":
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

    def weights(self, pool: list[dict]) -> list[float]:
        """Each prompt's weight in a draw: the weighting of its estimated p, plus the floor."""
        weigh, prior = PROMPT_WEIGHTINGS[self.weighting], self.prior_mean()
        return [weigh(self.estimate(s, prior), self.target_p, self.target_width) + self.floor for s in pool]

    def _weighted(self, n: int) -> list[dict]:
        rng = random.Random(f"{self.seed}:curriculum:{self.draws}")
        self.draws += 1
        pool = [s for s in self.samples if not self._aside(s)] or list(self.samples)
        if len(pool) < len(self.samples):
            for sample in self.samples:
                if self._aside(sample):
                    self._sit_out(sample)
        weights = self.weights(pool)
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
            record = self.records.setdefault(str(sample["id"]), [0, 0, 0, 0])
            record[0] += count
            record[1] += group_size
            # no variance: nothing to learn from it; after filter_after such groups in a row, not for a while
            record[3] = record[3] + 1 if count in (0, group_size) else 0
            if record[3] >= self.filter_after:
                record[2], record[3] = self.retest_after, 0

    def stats(self) -> dict:
        tried = [r for r in self.records.values() if r[1]]
        return {"curriculum/set_aside": sum(1 for s in self.samples if self._aside(s)),
                "curriculum/skipped": self.skipped,
                "curriculum/seen": len(tried)}

    def state(self) -> dict:
        return {**super().state(), "records": self.records, "draws": self.draws, "skipped": self.skipped}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        # a checkpoint from before filter_after holds 3 numbers a prompt: no saturated groups counted
        self.records = {k: list(v) + [0] * (4 - len(v)) for k, v in state.get("records", {}).items()}
        self.draws, self.skipped = state.get("draws", 0), state.get("skipped", 0)
