"""Reward shaping before advantages, against numbers computed by hand."""

import pytest
import torch

from aha.algorithms import (
    adapt_length_coef,
    dither_rewards,
    length_cost,
    outcome_token_rewards,
    overlong_penalty,
    replay_priorities,
)


def test_overlong_penalty_is_zero_then_linear_then_floor():
    lengths = torch.tensor([10, 12, 14, 16])
    torch.testing.assert_close(overlong_penalty(lengths, max_len=16, buffer=4, factor=1.0),
                               torch.tensor([0.0, 0.0, -0.5, -1.0]))
    with pytest.raises(ValueError, match="overlong buffer must be in 1..16"):
        overlong_penalty(lengths, 16, 0)


def test_dither_rewards_is_zero_mean_noise_of_the_given_scale():
    g = torch.Generator().manual_seed(0)
    base = torch.zeros(200_000)
    gauss = dither_rewards(base, 0.1, "gaussian", g)
    assert abs(float(gauss.mean())) < 1e-3 and float(gauss.std()) == pytest.approx(0.1, rel=0.01)
    uni = dither_rewards(base, 0.2, "uniform", g)
    assert float(uni.abs().max()) <= 0.2 and float(uni.std()) == pytest.approx(0.2 / 3**0.5, rel=0.01)
    with pytest.raises(ValueError, match="unknown noise kind"):
        dither_rewards(base, 0.1, "laplace")


def test_outcome_token_rewards_sit_on_the_last_valid_token():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    tr = outcome_token_rewards(torch.tensor([2.0, -1.0, 5.0]), mask)
    assert tr.tolist() == [[0.0, 2.0, 0.0], [0.0, 0.0, -1.0], [0.0, 0.0, 0.0]]


def test_outcome_token_rewards_keep_a_non_finite_reward_where_the_estimators_see_it():
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    tr = outcome_token_rewards(torch.tensor([float("nan"), float("inf")]), mask)
    # on the last valid token, for the estimators to skip the row; a row without tokens gets none
    assert tr[0, 0] == 0 and tr[0, 1].isnan() and tr[0, 2] == 0
    assert tr[1].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"rewards must be \(N,\) = \(2,\) for a mask \(2, 3\), got \(2, 1\)"):
        outcome_token_rewards(torch.zeros(2, 1), mask)


def test_replay_priorities():
    torch.testing.assert_close(replay_priorities(torch.tensor([1.0, 3.0]), alpha=1.0), torch.tensor([0.25, 0.75]))
    torch.testing.assert_close(replay_priorities(torch.tensor([1.0, 3.0]), alpha=0.0), torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(replay_priorities(torch.zeros(2)), torch.tensor([0.5, 0.5]))


def test_length_cost_charges_only_the_charged_completions():
    lengths = torch.tensor([10, 20, 40, 40])
    charged = torch.tensor([True, True, True, False])
    assert length_cost(lengths, 40, 0.5, charged).tolist() == [-0.125, -0.25, -0.5, 0.0]


def test_adaptive_length_coefficient_follows_accuracy_minus_target():
    coef, trace = 0.0, []
    for accuracy in [0.9, 1.0, 1.0, 1.0, 0.4, 0.6, 0.8, 0.2]:
        coef = adapt_length_coef(coef, accuracy, target=0.8, rate=0.5, max_coef=0.25)
        trace.append(round(coef, 6))
    # +0.05, +0.1, +0.1 (capped at 0.25), +0.1 (stays), -0.2, -0.1 (floor 0), 0, -0.3 (floor)
    assert trace == [0.05, 0.15, 0.25, 0.25, 0.05, 0.0, 0.0, 0.0]
