"""The RL maths against numbers computed by hand."""

import math

import pytest
import torch

from aha.algorithms import clipped_surrogate, grpo_advantages, kl_k3, token_mean
from aha.algorithms.advantages import zero_variance_groups


def test_grpo_advantages_std_uses_unbiased_group_std():
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0], [3.0, 1.0, 2.0, 2.0]]), "std", eps=0.0)
    # group 1: mean .5, unbiased std sqrt(1/3); group 2: mean 2, std sqrt(2/3)
    s1, s2 = math.sqrt(1 / 3), math.sqrt(2 / 3)
    expected = torch.tensor([[0.5 / s1, -0.5 / s1, 0.5 / s1, -0.5 / s1], [1 / s2, -1 / s2, 0.0, 0.0]])
    torch.testing.assert_close(adv, expected)


def test_grpo_advantages_none_only_centres():
    adv = grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), "none")
    torch.testing.assert_close(adv, torch.tensor([[0.75, -0.25, -0.25, -0.25]]))


def test_flat_groups_have_zero_advantage_and_are_detected():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(grpo_advantages(rewards)[0], torch.zeros(3))
    assert torch.equal(grpo_advantages(rewards)[2], torch.zeros(3))
    assert zero_variance_groups(rewards).tolist() == [True, False, True]


def test_grpo_advantages_rejects_bad_input():
    with pytest.raises(ValueError, match="num_prompts, group_size"):
        grpo_advantages(torch.zeros(4))
    with pytest.raises(ValueError, match="unknown advantage scale 'max'"):
        grpo_advantages(torch.zeros(2, 2), "max")


def test_clipped_surrogate_by_hand():
    logp = torch.log(torch.tensor([1.5, 1.5, 0.5, 0.5, 1.1]))
    old = torch.zeros(5)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0])
    loss, clipped = clipped_surrogate(logp, old, adv, clip_low=0.2, clip_high=0.28)
    # ratio 1.5, A=+1: capped at 1.28. ratio 1.5, A=-1: pessimistic -1.5 kept (no clip).
    # ratio 0.5, A=+1: 0.5 kept. ratio 0.5, A=-1: floor 0.8 binds. ratio 1.1 inside: 2.2.
    torch.testing.assert_close(loss, torch.tensor([-1.28, 1.5, -0.5, 0.8, -2.2]))
    assert clipped.tolist() == [True, False, False, True, False]


def test_clipped_surrogate_gradient_is_advantage_at_ratio_one():
    logp = torch.zeros(3, requires_grad=True)
    loss, _ = clipped_surrogate(logp, torch.zeros(3), torch.tensor([2.0, -1.0, 0.0]))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([-2.0, 1.0, 0.0]))


def test_kl_k3_by_hand():
    kl = kl_k3(torch.log(torch.tensor([0.5, 0.3])), torch.log(torch.tensor([0.25, 0.3])))
    # log r = log(.25/.5) = -ln 2: k3 = .5 + ln 2 - 1; equal probabilities: 0
    torch.testing.assert_close(kl, torch.tensor([0.5 + math.log(2) - 1, 0.0]))


def test_token_mean_counts_only_valid_tokens():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(token_mean(values, mask), torch.tensor(7 / 3))
    # micro-batches divide by the whole batch's count, so their sum is the full mean
    halves = token_mean(values[:1], mask[:1], 3) + token_mean(values[1:], mask[1:], 3)
    torch.testing.assert_close(halves, torch.tensor(7 / 3))
