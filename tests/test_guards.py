"""The training side of the maths guards: a NaN or inf reward reaching estimate_advantages
gives its row zero advantage, leaves the other rows as if it were not there, and is counted."""

import math

import pytest
import torch

from aha.config import AlgorithmConfig
from aha.rollout import Rollouts
from aha.training.rl.batch import Batch
from aha.training.rl.estimate import estimate_advantages

G = 4
NAN, INF = float("nan"), float("inf")


def batch_of(rewards, width=3):
    """Two groups of 4 rows; rows 0, 4 and 5 have 2 valid tokens, the others 3."""
    rows = len(rewards)
    mask = torch.ones(rows, width)
    mask[[0, 4, 5], -1] = 0.0
    ro = Rollouts(torch.zeros(rows, 2, dtype=torch.long), torch.ones(rows, 2, dtype=torch.long),
                  torch.ones(rows, width, dtype=torch.long), mask, torch.zeros(rows, width),
                  torch.arange(rows) // G, [""] * rows, torch.zeros(rows, dtype=torch.bool))
    return Batch(ro, torch.tensor(rewards))


REWARDS = [1.0, NAN, 0.0, 1.0, 0.0, 1.0, INF, 0.0]  # a NaN in group 1, an inf in group 2


@pytest.mark.parametrize("algo_kwargs", [{}, {"advantage_scale": "none"}, {"advantage": "rloo"},
                                         {"advantage": "reinforce_pp"}, {"advantage": "reinforce_pp",
                                                                         "group_baseline": False},
                                         {"whiten_advantages": True}, {"token_weighting": "ktae"}],
                         ids=["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_global", "whitened", "ktae"])
def test_non_finite_rewards_get_zero_advantage_and_are_counted(algo_kwargs):
    batch = batch_of(REWARDS)
    stats = estimate_advantages(batch, AlgorithmConfig(**algo_kwargs), G)
    adv = batch.advantages
    assert stats["reward/nonfinite"] == 2
    assert torch.isfinite(adv).all() and all(math.isfinite(v) for v in stats.values())
    assert torch.equal(adv[[1, 6]], torch.zeros(2, 3))
    assert (adv[[0, 2, 3, 4, 5, 7]].abs().sum(dim=1) > 0).all()  # every other row still learns
    assert (adv[batch.rollouts.completion_mask == 0] == 0).all()


def test_the_other_rows_get_what_they_would_without_the_broken_ones():
    batch = batch_of(REWARDS)
    estimate_advantages(batch, AlgorithmConfig(), G)
    # group 1: finite 1, 0, 1 -> mean 2/3, unbiased std sqrt(1/3); group 2: 0, 1, 0 likewise
    s, eps = math.sqrt(1 / 3), 1e-6
    up, down = (1 - 2 / 3) / (s + eps), -(2 / 3) / (s + eps)
    expected = torch.tensor([up, 0.0, down, up, -up, -down, 0.0, -up])
    torch.testing.assert_close(batch.advantages[:, 0], expected)


def test_gae_row_with_a_non_finite_reward_keeps_its_value_target():
    batch = batch_of(REWARDS)
    batch.old_values = torch.full((8, 3), 0.25) * batch.rollouts.completion_mask
    stats = estimate_advantages(batch, AlgorithmConfig(advantage="gae"), G)
    assert stats["reward/nonfinite"] == 2 and torch.isfinite(batch.advantages).all()
    assert torch.equal(batch.advantages[[1, 6]], torch.zeros(2, 3))
    assert torch.equal(batch.returns[[1, 6]], batch.old_values[[1, 6]])
    torch.testing.assert_close(batch.advantages[0, :2], torch.tensor([0.75, 0.75]))  # 1 - 0.25 (gamma = lam = 1)


def test_remax_skips_a_non_finite_sample_and_a_prompt_without_a_greedy_baseline():
    batch = batch_of(REWARDS)
    batch.baseline = torch.tensor([0.5] * 4 + [NAN] * 4)
    assert estimate_advantages(batch, AlgorithmConfig(advantage="remax"), G)["reward/nonfinite"] == 2
    assert batch.advantages[:, 0].tolist() == [0.5, 0.0, -0.5, 0.5, 0.0, 0.0, 0.0, 0.0]


def test_a_clean_batch_counts_zero():
    batch = batch_of([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    assert estimate_advantages(batch, AlgorithmConfig(), G)["reward/nonfinite"] == 0
    assert torch.equal(batch.advantages[4:], torch.zeros(4, 3))  # the flat group: exactly 0
