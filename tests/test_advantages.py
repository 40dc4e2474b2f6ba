"""Advantage estimators against numbers computed by hand."""

import math

import pytest
import torch

from aha.algorithms import (
    discounted_returns,
    finite_reward_mask,
    gae_advantages,
    grpo_advantages,
    ktae_token_weights,
    masked_mean,
    masked_whiten,
    reinforce_pp_advantages,
    remax_advantages,
    rloo_advantages,
    zero_variance_groups,
)


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


def test_single_sample_group():
    # one sample: no group to compare with. Dr. GRPO centres to 0; std and RLOO refuse.
    assert grpo_advantages(torch.tensor([[0.7], [0.2]]), "none").tolist() == [[0.0], [0.0]]
    with pytest.raises(ValueError, match="group_size >= 2"):
        grpo_advantages(torch.tensor([[0.7]]), "std")
    with pytest.raises(ValueError, match="RLOO needs group_size >= 2"):
        rloo_advantages(torch.tensor([[0.7]]))


def test_rloo_leaves_each_sample_out_of_its_baseline():
    adv = rloo_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]]))
    # sample 0: 1 - mean(0, 0, 1) = 2/3; sample 1: 0 - mean(1, 0, 1) = -2/3
    torch.testing.assert_close(adv, torch.tensor([[2 / 3, -2 / 3, -2 / 3, 2 / 3], [0.0, 0.0, 0.0, 0.0]]))
    # the independent formula: G/(G-1) times the centred reward
    r = torch.tensor([[3.0, 1.0, 0.5]])
    torch.testing.assert_close(rloo_advantages(r), 1.5 * (r - r.mean()))


def test_remax_subtracts_the_greedy_reward():
    adv = remax_advantages(torch.tensor([[1.0, 0.0], [1.0, 1.0]]), torch.tensor([1.0, 0.0]))
    assert adv.tolist() == [[0.0, -1.0], [1.0, 1.0]]  # a flat group still learns if greedy failed
    with pytest.raises(ValueError, match="greedy_rewards must be"):
        remax_advantages(torch.zeros(2, 2), torch.zeros(3))


def test_masked_whiten_uses_valid_tokens_only():
    values = torch.tensor([[1.0, 3.0, 99.0], [5.0, 99.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    # valid 1, 3, 5: mean 3, unbiased std 2
    torch.testing.assert_close(masked_whiten(values, mask), torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
                               atol=1e-6, rtol=0)
    assert masked_whiten(values, torch.zeros_like(mask)).abs().sum() == 0  # all masked: zeros, no NaN


def test_discounted_returns_by_hand():
    rewards = torch.tensor([[0.0, -0.1, 1.0, 0.0], [2.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    # gamma .5: G2 = 1, G1 = -.1 + .5, G0 = 0 + .5 * .4
    torch.testing.assert_close(discounted_returns(rewards, mask, 0.5),
                               torch.tensor([[0.2, 0.4, 1.0, 0.0], [2.0, 0.0, 0.0, 0.0]]))


def test_reinforce_pp_normalises_over_the_whole_batch():
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0], [3.0, 0.0]])
    adv = reinforce_pp_advantages(rewards, mask)
    # returns 1,1 | 0 | 0,0 | 3 over six valid tokens: mean 5/6, unbiased std over all of them
    valid = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 3.0])
    expected = (valid - valid.mean()) / valid.std()
    torch.testing.assert_close(adv[mask.bool()], expected, atol=1e-6, rtol=0)
    assert adv[~mask.bool()].abs().sum() == 0
    # -baseline: subtract the group's mean sequence return first (groups of 2 rows)
    based = reinforce_pp_advantages(rewards, mask, group_size=2)
    centred = torch.tensor([0.5, 0.5, -0.5, -1.5, -1.5, 1.5])
    torch.testing.assert_close(based[mask.bool()], (centred - centred.mean()) / centred.std(), atol=1e-6, rtol=0)


def test_gae_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.25, 0.75]])
    mask = torch.ones(1, 3)
    adv, ret = gae_advantages(rewards, values, mask, gamma=0.9, lam=0.5)
    d2 = 1.0 - 0.75  # terminal: no next value
    d1 = 0.0 + 0.9 * 0.75 - 0.25
    d0 = 0.0 + 0.9 * 0.25 - 0.5
    a2 = d2
    a1 = d1 + 0.45 * a2
    a0 = d0 + 0.45 * a1
    torch.testing.assert_close(adv, torch.tensor([[a0, a1, a2]]))
    torch.testing.assert_close(ret, adv + values)


def test_gae_with_gamma_lambda_one_is_return_minus_value_and_stops_at_padding():
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]])
    values = torch.tensor([[0.3, 0.6, 9.0, 9.0], [0.1, 0.2, 0.3, 0.4]])  # 9s sit on padding
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    adv, ret = gae_advantages(rewards, values, mask, 1.0, 1.0)
    torch.testing.assert_close(adv, torch.tensor([[0.7, 0.4, 0.0, 0.0], [1.9, 1.8, 1.7, 1.6]]))
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 0.0, 0.0], [2.0, 2.0, 2.0, 2.0]]))


def test_ktae_weights_key_tokens_by_direction():
    # group of 4: tokens 5 and 6 appear only in the two winners, 7 only in the losers, 1 everywhere
    ids = torch.tensor([[5, 1, 0], [5, 6, 1], [7, 1, 0], [7, 1, 0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    w = ktae_token_weights(ids, mask, adv, group_size=4, alpha=0.5)
    # d(5) = 1 - 0 = 1; d(6) = 1/2 - 0; d(7) = 0 - 1 = -1; d(1) = 1 - 1 = 0
    torch.testing.assert_close(w, torch.tensor([[1.5, 1.0, 1.0], [1.5, 1.25, 1.0], [1.5, 1.0, 1.0], [1.5, 1.0, 1.0]]))


def test_ktae_on_a_flat_group_changes_nothing():
    ids = torch.tensor([[3, 4], [4, 3]])
    w = ktae_token_weights(ids, torch.ones(2, 2), torch.zeros(2), group_size=2)
    assert torch.equal(w, torch.ones(2, 2))
    with pytest.raises(ValueError, match="alpha must be in"):
        ktae_token_weights(ids, torch.ones(2, 2), torch.zeros(2), group_size=2, alpha=2.0)


def test_masked_mean():
    values = torch.tensor([[1.0, 3.0, 99.0], [5.0, 99.0, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert float(masked_mean(values, mask)) == 3.0
    assert float(masked_mean(values, torch.zeros_like(mask))) == 0.0


# --- guards: flat groups are exactly 0, non-finite rewards are skipped, padding is selected away

FLAT_GROUPS = [(0.1, 8), (1 / 3, 8), (7.3, 16)]
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("value, size", FLAT_GROUPS)
def test_flat_group_advantage_is_exactly_zero_in_any_dtype(dtype, value, size):
    # float32: mean([0.1] * 8) is one ulp off 0.1, and ulp / (0 + eps) used to give +-0.1
    rewards = torch.full((2, size), value, dtype=dtype)
    rewards[1, 0] = 0.0  # an informative group next to the flat one is still normalised
    zeros = torch.zeros(size, dtype=dtype)
    for adv in (grpo_advantages(rewards, "std"), grpo_advantages(rewards, "none"), rloo_advantages(rewards)):
        assert adv.dtype == dtype and torch.equal(adv[0], zeros)
        assert adv[1, 0] < 0 and (adv[1, 1:] > 0).all()
    assert zero_variance_groups(rewards).tolist() == [True, False]
    # REINFORCE++-baseline: the flat group's returns minus its baseline, exactly 0
    mask = torch.ones(2 * size, 1, dtype=dtype)
    token = rewards.reshape(-1, 1)
    assert torch.equal(reinforce_pp_advantages(token[:size], mask[:size], group_size=size), zeros.view(-1, 1))
    # whitening a batch whose valid values are all equal: exactly 0 rather than ulp / sqrt(eps)
    assert torch.equal(masked_whiten(torch.full((3, 4), value, dtype=dtype), torch.ones(3, 4, dtype=dtype)),
                       torch.zeros(3, 4, dtype=dtype))


def test_non_finite_rewards_get_zero_and_leave_their_group_alone():
    nan, inf = float("nan"), float("inf")
    rewards = torch.tensor([[1.0, nan, 0.0, inf, 1.0, 0.0],
                            [2.0, 2.0, nan, 2.0, -inf, 2.0],  # flat once the non-finite are left out
                            [nan, nan, nan, nan, nan, nan]])
    adv = grpo_advantages(rewards, eps=0.0)
    # row 0: finite 1, 0, 1, 0 -> mean 1/2, unbiased std sqrt(1/3): +-sqrt(3)/2
    h = math.sqrt(3) / 2
    torch.testing.assert_close(adv[0], torch.tensor([h, 0.0, -h, 0.0, h, -h]))
    assert adv[0, 1] == 0 and adv[0, 3] == 0
    assert torch.equal(adv[1:], torch.zeros(2, 6))
    # the same as the group without its non-finite samples
    torch.testing.assert_close(adv[0, [0, 2, 4, 5]], grpo_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]), eps=0.0)[0])
    assert torch.equal(grpo_advantages(rewards, "none")[0], torch.tensor([0.5, 0.0, -0.5, 0.0, 0.5, -0.5]))
    # a NaN never makes a group look informative
    assert zero_variance_groups(rewards).tolist() == [False, True, True]
    assert finite_reward_mask(rewards[0]).tolist() == [True, False, True, False, True, True]


def test_rloo_and_remax_skip_non_finite_rewards():
    nan, inf = float("nan"), float("inf")
    # finite 1, 0, 0: sample 0 gets 1 - mean(0, 0) = 1, samples 1 and 3 get 0 - mean(1, 0) = -1/2
    adv = rloo_advantages(torch.tensor([[1.0, 0.0, nan, 0.0], [5.0, nan, inf, -inf]]))
    assert adv.tolist() == [[1.0, -0.5, 0.0, -0.5], [0.0, 0.0, 0.0, 0.0]]  # row 1: no other finite sample
    # ReMax: a non-finite sample gets 0; a non-finite greedy reward leaves its prompt without a baseline
    adv = remax_advantages(torch.tensor([[1.0, nan], [1.0, 0.0]]), torch.tensor([0.25, nan]))
    assert adv.tolist() == [[0.75, 0.0], [0.0, 0.0]]


def test_token_level_estimators_skip_rows_with_non_finite_rewards():
    nan = float("nan")
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, nan], [3.0, 0.0]])
    based = reinforce_pp_advantages(rewards, mask, group_size=2)
    # row 2 is out: group 2's baseline is row 3's return 3, so row 3 returns 0;
    # group 1: returns 1, 1 | 0, baseline 1/2 -> 1/2, 1/2 | -1/2; then whitened over 4 tokens
    centred = torch.tensor([0.5, 0.5, -0.5, 0.0])
    expected = (centred - centred.mean()) / centred.std()
    torch.testing.assert_close(based[[0, 0, 1, 3], [0, 1, 0, 0]], expected, atol=1e-6, rtol=0)
    assert torch.equal(based[2], torch.zeros(2)) and torch.isfinite(based).all()
    plain = reinforce_pp_advantages(rewards, mask)  # returns 1, 1 | 0 | 3
    valid = torch.tensor([1.0, 1.0, 0.0, 3.0])
    torch.testing.assert_close(plain[[0, 0, 1, 3], [0, 1, 0, 0]], (valid - valid.mean()) / valid.std(), atol=1e-6,
                               rtol=0)
    assert torch.equal(plain[2], torch.zeros(2))
    # GAE: the row gets advantage 0 and its value target stays its value
    values = torch.tensor([[0.5, 0.25], [0.1, 9.0], [0.3, 0.4], [0.0, 0.0]])
    adv, ret = gae_advantages(rewards, values, mask)
    assert torch.equal(adv[2], torch.zeros(2)) and torch.equal(ret[2], values[2])
    torch.testing.assert_close(adv[0], torch.tensor([0.5, 0.75]))  # 1 - 0.5, 1 - 0.25
    assert float(ret[1, 1]) == 0.0  # padding


def test_padding_holding_nan_or_inf_is_ignored():
    nan, inf = float("nan"), float("inf")
    values = torch.tensor([[1.0, 3.0, nan], [5.0, inf, -inf]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert float(masked_mean(values, mask)) == 3.0
    torch.testing.assert_close(masked_whiten(values, mask), torch.tensor([[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
                               atol=1e-6, rtol=0)
    assert torch.equal(discounted_returns(values, mask), torch.tensor([[4.0, 3.0, 0.0], [5.0, 0.0, 0.0]]))


def test_estimators_reject_a_mask_of_another_shape():
    with pytest.raises(ValueError, match=r"values and mask must have the same shape, got values \(2, 3\) and mask \(2, "
                                         r"1\)"):
        masked_whiten(torch.zeros(2, 3), torch.ones(2, 1))
    with pytest.raises(ValueError, match=r"token_rewards and mask must have the same shape"):
        reinforce_pp_advantages(torch.zeros(2, 3), torch.ones(3, 3))
