"""The length rules of an RL run that read a prompt's own group: LASER-D's target length per
difficulty bucket (algorithm.length_shaping=laser_d) and A-DLP's coefficient per prompt
(algorithm.length_adaptive_per=prompt).

Every round of a step is shaped with the state the step started with; the state learns from
all the step's groups at its end (update), like the batch A-DLP coefficient. The checkpoint
holds it (state / load_state), so a resumed run shapes exactly as one never stopped."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aha.algorithms import BUCKETS, adapt_prompt_coefs, difficulty_buckets, laser_d_targets, row_targets
from aha.config import AlgorithmConfig


@dataclass
class Observed:
    """One round's groups: each group's prompt id, and each row's correctness and length."""

    ids: list[str]
    correct: torch.Tensor  # (N,) bool: reward total >= length_correct_min
    lengths: torch.Tensor  # (N,) generated tokens


class LengthShaping:
    """The per-prompt and per-difficulty length state: A-DLP coefficients by prompt id (a
    prompt never seen starts at length_coef) and LASER-D's three target lengths (max_new_tokens,
    no limit, until a bucket has groups)."""

    def __init__(self, algo: AlgorithmConfig, max_new_tokens: int, group_size: int):
        self.algo, self.max_new_tokens, self.group_size = algo, max_new_tokens, group_size
        self.per_prompt = algo.length_adaptive and algo.length_adaptive_per == "prompt"
        self.laser_d = algo.length_shaping == "laser_d"
        self.coefs: dict[str, float] = {}
        self.targets = [max_new_tokens] * len(BUCKETS)
        self.observed: list[Observed] = []

    def coef(self, samples: list[dict], batch_coef: float) -> float | torch.Tensor:
        """Each row's length coefficient (samples: each row's prompt), its prompt's own; without
        per-prompt A-DLP, the run's."""
        if not self.per_prompt:
            return batch_coef
        return torch.tensor([self.coefs.get(str(s["id"]), self.algo.length_coef) for s in samples])

    def row_targets(self, correct: torch.Tensor) -> torch.Tensor | None:
        """Each row's LASER-D target, its group's bucket's (correct: (N,) in groups); None without LASER-D."""
        return row_targets(correct.view(-1, self.group_size), self.targets) if self.laser_d else None

    def observe(self, chosen: list[dict], correct: torch.Tensor, lengths: torch.Tensor) -> None:
        """A round's groups (group g is chosen[g]'s), learnt from at the end of the step."""
        self.observed.append(Observed([str(s["id"]) for s in chosen], correct.clone(), lengths.clone()))

    def update(self) -> dict:
        """Learn from the step's groups; return the step's metrics (the state it was shaped with)."""
        if not self.observed:
            return {}
        G = self.group_size
        ids = [i for o in self.observed for i in o.ids]
        correct = torch.cat([o.correct for o in self.observed]).view(-1, G)
        lengths = torch.cat([o.lengths for o in self.observed]).view(-1, G)
        right = correct.sum(dim=1)
        self.observed = []
        stats = {}
        if self.per_prompt:
            algo = self.algo
            stats["length/penalty_coef"] = sum(self.coefs.get(i, algo.length_coef) for i in ids) / len(ids)
            self.coefs = adapt_prompt_coefs(self.coefs, ids, right.tolist(), G, algo.length_coef,
                                            algo.length_target_acc, algo.length_coef_rate, algo.length_coef_max)
            stats["length/prompts_tracked"] = len(self.coefs)
        if self.laser_d:
            stats.update(self._laser_stats(correct, lengths))
            self.targets = laser_d_targets(right, lengths, self.targets, self.algo.laser_expected_correct,
                                           self.max_new_tokens)
        return stats

    def _laser_stats(self, correct: torch.Tensor, lengths: torch.Tensor) -> dict:
        """The targets this step was shaped with, its groups per bucket and their mean length,
        and the share of completions correct and within their target (before truncated_reward)."""
        buckets = difficulty_buckets(correct.sum(dim=1), self.group_size)
        targets = row_targets(correct, self.targets).view_as(lengths)
        stats = {"laser/target_mean": float(targets.float().mean()),
                 "laser/bonus_frac": float((correct & (lengths <= targets)).float().mean())}
        for b, name in enumerate(BUCKETS):
            stats[f"laser/target_{name}"] = self.targets[b]
            stats[f"laser/groups_{name}"] = int((buckets == b).sum())
            if (buckets == b).any():
                stats[f"laser/length_{name}"] = float(lengths[buckets == b].float().mean())
        return stats

    def state(self) -> dict:
        return {"coefs": dict(self.coefs), "targets": list(self.targets)}

    def load_state(self, state: dict) -> None:
        self.coefs = {str(k): float(v) for k, v in state["coefs"].items()}
        self.targets = [int(t) for t in state["targets"]]


def build_length_shaping(algo: AlgorithmConfig, max_new_tokens: int, group_size: int) -> LengthShaping | None:
    """The run's per-prompt length state, or None when neither LASER-D nor per-prompt A-DLP is on."""
    if algo.length_shaping == "laser_d" or (algo.length_adaptive and algo.length_adaptive_per == "prompt"):
        return LengthShaping(algo, max_new_tokens, group_size)
    return None
