"""A reward model that keeps learning during RL (Cooper: Hong et al. 2025, arXiv 2508.05613).

`reward: [{model: runs/rm, online: {verifier: numeric_answer}}]`: the reward model scores the
step's completions as any reward does; after the policy's update, every `online.every` steps,
it takes Bradley-Terry steps on pairs from the step's groups: the verifier's right completion
it scores lowest against the verifier's wrong one it scores highest
(algorithms/verified_pairs.py). A policy that finds what a frozen reward model over-rates
produces exactly the wrong answers it over-rates, and those become its next pairs.

The labels are the scores the step already has: the verifier's component of the reward (a
weight of 0 keeps it out of the total) or of monitor.gold (the monitor scores it on every
sample). A sample the verifier failed on scored 0 there and counts as wrong. The reward
model's weights and optimizer are in every checkpoint ("online_rm"), so a resume continues
exactly."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from aha.algorithms import bradley_terry_loss
from aha.algorithms.verified_pairs import verified_pairs, verifier_agreement
from aha.config import Config, ConfigError
from aha.config.sections import OnlineRMConfig, component_name
from aha.rewards import CompositeReward, RewardResult
from aha.rewards.learned import LearnedModel
from aha.training.optimizer import accumulated_step, build_optimizer

if TYPE_CHECKING:  # collect imports this module's users; only the type is needed here
    from aha.training.rl.collect import RoundStats

log = logging.getLogger(__name__)


def learning_reward_model(config: Config, reward: CompositeReward) -> tuple[int, LearnedModel] | None:
    """(i, the reward model) of reward[i].online, or None when no reward learns. A config error
    when reward[i] is not a reward model trained with method: rm (a process reward model
    scores steps, which these pairs do not label)."""
    found = [i for i, spec in enumerate(config.reward) if spec.online is not None]
    if not found:
        return None
    i = found[0]
    name = component_name(config.reward[i])
    component = next(c for c in reward.components if c.name == name)
    learned = getattr(component.fn, "aha_learned", None)
    if learned is None:
        raise ConfigError(f"reward[{i}].online: {config.reward[i].model} is a process reward model (method: prm); "
                          "online updates train a reward model of whole completions (method: rm)")
    return i, learned


def verifier_scores(verifier: str, from_gold: bool, seen: RoundStats, gold: RewardResult | None
                    ) -> torch.Tensor | None:
    """(N,) the rule verifier's scores of the step's samples, from monitor.gold's result
    (from_gold) or the reward's own components; None if they do not line up with the samples.
    The labels of a reward model that learns online and of the referee (training/rl/referee.py)."""
    if from_gold:
        values = None if gold is None else gold.components.get(verifier)
    else:
        values = torch.cat(seen.components[verifier]) if verifier in seen.components else None
    return values if values is not None and len(values) == len(seen.texts) else None


@dataclass
class OnlineRM:
    """The reward model that learns, its optimizer, and where its labels come from."""

    cfg: OnlineRMConfig
    name: str  # the reward model's component name (reward/<name>)
    learned: LearnedModel
    from_gold: bool  # the verifier is a component of monitor.gold, not of reward
    optimizer: torch.optim.Optimizer
    group_size: int
    micro_pairs: int  # pairs a micro-batch (two sequences each)
    max_grad_norm: float

    def labels(self, seen: RoundStats, gold: RewardResult | None) -> torch.Tensor | None:
        return verifier_scores(self.cfg.verifier, self.from_gold, seen, gold)

    def update(self, step: int, seen: RoundStats, gold: RewardResult | None) -> dict:
        """The reward model's agreement with the verifier on the step's samples; on every
        `every`-th step, its Bradley-Terry steps on the step's pairs and what they did."""
        verdicts = self.labels(seen, gold)
        scores = torch.cat(seen.components[self.name]) if self.name in seen.components else None
        if verdicts is None or scores is None or len(scores) != len(seen.texts):
            # a component every sample of a round failed on is missing for that round; a verifier
            # that returns a dict has parts (name/key), not one score
            log.warning("step %d: no score of %s or of the verifier %s for some samples (all failed in a round, or "
                        "parts of a dict); no online update this step", step, self.name, self.cfg.verifier)
            return {"rm_online/pairs": 0} if step % self.cfg.every == 0 else {}
        right = verdicts >= self.cfg.threshold
        sequences = self.learned.encode(seen.texts, seen.samples)
        usable = torch.tensor([ids is not None for ids in sequences], dtype=torch.bool)
        agreement, compared = verifier_agreement(scores, right, usable, self.group_size)
        stats = {"rm_online/right_frac": float(right.float().mean())}
        if compared:
            stats["rm_online/agreement"] = agreement
        if step % self.cfg.every:
            return stats
        pairs = verified_pairs(scores, right, usable, self.group_size, self.cfg.pairs_per_update)
        stats["rm_online/pairs"] = len(pairs)
        if pairs:
            stats["rm_online/accuracy"] = sum(float(scores[c] > scores[r]) for c, r in pairs) / len(pairs)
            stats.update(self._train([sequences[c] for c, _ in pairs], [sequences[r] for _, r in pairs]))
        return stats

    def _train(self, chosen: list[list[int]], rejected: list[list[int]]) -> dict:
        """cfg.steps optimizer steps of the Bradley-Terry loss over all the pairs, each head on
        every pair (the mean over pairs and heads), accumulated over micro-batches."""
        model, n = self.learned.model, len(chosen)
        groups = [list(range(start, min(start + self.micro_pairs, n))) for start in range(0, n, self.micro_pairs)]

        def loss_of(group: list[int]) -> torch.Tensor:
            rewards = model([chosen[i] for i in group] + [rejected[i] for i in group], self.learned.dtype)
            k = len(group)
            return bradley_terry_loss(rewards[:k].reshape(-1), rewards[k:].reshape(-1)).sum() / (n * model.heads)

        done = [accumulated_step(model, self.optimizer, groups, loss_of, self.max_grad_norm)
                for _ in range(self.cfg.steps)]
        self.optimizer.zero_grad(set_to_none=True)  # the gradients are a copy of the model: not kept between steps
        return {"rm_online/loss": done[0]["loss/total"], "rm_online/grad_norm": done[0]["grad_norm"],
                "rm_online/skipped_updates": sum(d["train/skipped_updates"] for d in done)}


def build_online_rm(config: Config, reward: CompositeReward) -> OnlineRM | None:
    """The reward model of reward[i].online made trainable, with its own AdamW (online.lr), or None."""
    found = learning_reward_model(config, reward)
    if found is None:
        return None
    i, learned = found
    spec, train = config.reward[i], config.train
    in_reward = any(c.name == spec.online.verifier for c in reward.components)
    learned.model.requires_grad_(True)  # the reward scores under no_grad: only the update builds a graph
    optimizer = build_optimizer(learned.model.parameters(), train, lr=spec.online.lr)
    return OnlineRM(spec.online, component_name(spec), learned, not in_reward, optimizer, config.rollout.group_size,
                    max(1, train.micro_batch_size // 2), train.max_grad_norm)
