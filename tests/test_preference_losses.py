"""Preference losses against values computed by hand (math module, float64)."""

import math

import pytest
import torch

from aha.algorithms import (
    bco_pair_loss,
    bradley_terry_loss,
    dpo_loss,
    hinge_loss,
    ipo_loss,
    kto_loss,
    kto_reference_point,
    orpo_loss,
    preference_logits,
    reward_offset,
    simpo_loss,
    tdpo_loss,
    token_kl,
)

T = lambda *v: torch.tensor(v, dtype=torch.float64)
log_sigmoid = lambda x: -math.log1p(math.exp(-x))

# two pairs: policy and reference log-probs of the chosen and rejected completions
PC, PR, RC, RR = T(-10.0, -4.0), T(-12.0, -3.0), T(-11.0, -5.0), T(-11.5, -3.5)
LOGITS = [(-10 + 11) - (-12 + 11.5), (-4 + 5) - (-3 + 3.5)]  # 1.5, 0.5


def test_preference_logits():
    assert preference_logits(PC, PR, RC, RR).tolist() == LOGITS


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_dpo_is_minus_log_sigmoid_of_beta_logits(beta):
    expected = [-log_sigmoid(beta * z) for z in LOGITS]
    torch.testing.assert_close(dpo_loss(PC, PR, RC, RR, beta), T(*expected), rtol=1e-12, atol=0)


def test_cdpo_mixes_both_labels():
    beta, eps = 0.5, 0.2
    expected = [-(1 - eps) * log_sigmoid(beta * z) - eps * log_sigmoid(-beta * z) for z in LOGITS]
    torch.testing.assert_close(dpo_loss(PC, PR, RC, RR, beta, label_smoothing=eps), T(*expected), rtol=1e-12, atol=0)
    # at logits 0 every label smoothing gives log 2
    zero = T(0.0)
    assert dpo_loss(zero, zero, zero, zero, 1.0, 0.3).item() == pytest.approx(math.log(2), rel=1e-12)
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        dpo_loss(PC, PR, RC, RR, 0.1, label_smoothing=0.5)


def test_dpo_gradient_pushes_the_chosen_up_and_the_rejected_down():
    pc, pr = PC.clone().requires_grad_(), PR.clone().requires_grad_()
    dpo_loss(pc, pr, RC, RR, 0.5).sum().backward()
    # d/dpc of -log sigma(b z) = -b * (1 - sigma(b z))
    expected = [-0.5 * (1 - 1 / (1 + math.exp(-0.5 * z))) for z in LOGITS]
    torch.testing.assert_close(pc.grad, T(*expected), rtol=1e-12, atol=0)
    torch.testing.assert_close(pr.grad, -T(*expected), rtol=1e-12, atol=0)


def test_ipo_holds_the_margin_at_one_over_two_beta():
    beta = 0.25  # target margin 2
    torch.testing.assert_close(ipo_loss(PC, PR, RC, RR, beta), T((1.5 - 2) ** 2, (0.5 - 2) ** 2), rtol=1e-12, atol=0)
    at_target = T(2.0)
    assert ipo_loss(at_target, T(0.0), T(0.0), T(0.0), beta).item() == 0.0
    with pytest.raises(ValueError, match="beta must be > 0"):
        ipo_loss(PC, PR, RC, RR, 0.0)


def test_simpo_uses_average_logprobs_and_a_margin_without_a_reference():
    chosen, rejected = T(-0.5, -1.0), T(-0.9, -0.8)  # per-token averages
    beta, gamma = 2.0, 0.5
    expected = [-log_sigmoid(beta * (c - r) - gamma) for c, r in zip(chosen.tolist(), rejected.tolist())]
    torch.testing.assert_close(simpo_loss(chosen, rejected, beta, gamma), T(*expected), rtol=1e-12, atol=0)


def test_orpo_adds_the_odds_ratio_term_to_the_chosen_nll():
    chosen, rejected, nll = T(-0.2, -1e-9), T(-1.5, -40.0), T(0.7, 0.1)
    beta = 0.1
    expected = []
    for c, r, n in zip(chosen.tolist(), rejected.tolist(), nll.tolist()):
        log_odds = lambda lp: lp - math.log(-math.expm1(lp))  # log(p / (1 - p)), p = exp(lp)
        expected.append(n - beta * log_sigmoid(log_odds(c) - log_odds(r)))
    got = orpo_loss(chosen, rejected, nll, beta)
    torch.testing.assert_close(got, T(*expected), rtol=1e-12, atol=0)
    assert torch.isfinite(got).all()  # a near-certain chosen (-1e-9) and a near-impossible rejected stay finite
    with pytest.raises(ValueError, match="needs average log-probs < 0"):
        orpo_loss(T(0.0), T(-1.0), T(0.0))


def test_kto_scores_each_completion_against_the_reference_point():
    policy, ref = T(-3.0, -5.0, -2.0), T(-4.0, -4.5, -2.5)  # log-ratios 1.0, -0.5, 0.5
    desirable = torch.tensor([True, False, False])
    beta, z0, wd, wu = 0.5, 0.2, 1.0, 1.5
    sig = lambda x: 1 / (1 + math.exp(-x))
    expected = [wd * (1 - sig(beta * (1.0 - z0))), wu * (1 - sig(beta * (z0 + 0.5))), wu * (1 - sig(beta * (z0 - 0.5)))]
    got = kto_loss(policy, ref, desirable, z0, beta, desirable_weight=wd, undesirable_weight=wu)
    torch.testing.assert_close(got, T(*expected), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="desirable must be a bool tensor"):
        kto_loss(policy, ref, desirable.long(), z0)


def test_kto_reference_point_is_the_clamped_mean_log_ratio_without_gradient():
    policy = T(-3.0, -5.0).requires_grad_()
    z0 = kto_reference_point(policy, T(-4.0, -4.0))  # log-ratios 1, -1: mean 0
    assert z0.item() == 0.0 and not z0.requires_grad
    assert kto_reference_point(T(-3.0, -3.0), T(-4.0, -4.5)).item() == 1.25
    assert kto_reference_point(T(-5.0), T(-4.0)).item() == 0.0  # a negative KL estimate is clamped


def test_bradley_terry_with_and_without_margin():
    chosen, rejected = T(1.0, -0.5), T(0.2, 0.5)
    torch.testing.assert_close(bradley_terry_loss(chosen, rejected), T(-log_sigmoid(0.8), -log_sigmoid(-1.0)),
                               rtol=1e-12, atol=0)
    margin = T(0.3, 1.0)
    torch.testing.assert_close(bradley_terry_loss(chosen, rejected, margin),
                               T(-log_sigmoid(0.5), -log_sigmoid(-2.0)), rtol=1e-12, atol=0)


def test_shapes_must_agree():
    with pytest.raises(ValueError, match="one value per pair"):
        dpo_loss(PC, PR, RC, T(1.0))
    with pytest.raises(ValueError, match="one value per pair"):
        bradley_terry_loss(torch.zeros(2, 1, dtype=torch.float64), torch.zeros(2, 1, dtype=torch.float64))


# ------------------------------------------------------------------------------------------
# TDPO, ODPO's offset, the hinge loss, BCO pairs (LOGITS above: 1.5 and 0.5)
# ------------------------------------------------------------------------------------------

def test_token_kl_is_the_reference_weighted_log_ratio_over_the_vocabulary():
    ln = math.log
    ref = T(ln(0.5), ln(0.25), ln(0.25))
    policy = T(ln(0.25), ln(0.25), ln(0.5)).requires_grad_()
    # 0.5 ln(0.5 / 0.25) + 0.25 ln(1) + 0.25 ln(0.25 / 0.5) = 0.25 ln 2
    kl = token_kl(ref, policy)
    assert kl.item() == pytest.approx(0.25 * ln(2), rel=1e-12)
    kl.backward()  # d KL / d log pi(v) = -ref(v): only the policy is differentiated
    torch.testing.assert_close(policy.grad, T(-0.5, -0.25, -0.25), rtol=1e-12, atol=0)
    # a token the reference never emits adds nothing (not 0 * inf); positions are kept apart
    never = T(0.0, -math.inf)
    both = token_kl(torch.stack([never, T(ln(0.5), ln(0.5))]), torch.stack([T(ln(0.5), ln(0.5))] * 2))
    torch.testing.assert_close(both, T(ln(2), 0.0), rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="differ"):
        token_kl(ref, T(0.0, 0.0))


KL_W, KL_L = T(0.4, 2.0), T(1.0, 0.5)  # sequential KL of each pair's chosen and rejected completion


def test_tdpo1_subtracts_beta_times_the_kl_gap_from_the_margin():
    beta = 0.5
    # pair 1: 0.5 * (1.5 - (1.0 - 0.4)) = 0.45; pair 2: 0.5 * (0.5 - (0.5 - 2.0)) = 1.0
    expected = [-log_sigmoid(0.45), -log_sigmoid(1.0)]
    torch.testing.assert_close(tdpo_loss(PC, PR, RC, RR, KL_W, KL_L, beta, version=1), T(*expected), rtol=1e-12,
                               atol=0)
    kl_w, kl_l = KL_W.clone().requires_grad_(), KL_L.clone().requires_grad_()
    tdpo_loss(PC, PR, RC, RR, kl_w, kl_l, beta, version=1).sum().backward()
    # d/d kl_l of -log sigma(x), x = beta * (m - kl_l + kl_w): beta * sigma(-x); kl_w the opposite
    sig = lambda x: 1 / (1 + math.exp(-x))
    torch.testing.assert_close(kl_l.grad, T(beta * sig(-0.45), beta * sig(-1.0)), rtol=1e-12, atol=0)
    torch.testing.assert_close(kl_w.grad, -kl_l.grad, rtol=1e-12, atol=0)


def test_tdpo2_weighs_the_kl_gap_by_alpha_and_stops_the_chosen_kls_gradient():
    beta, alpha = 0.5, 0.5
    # pair 1: 0.5 * (1.5 - 0.5 * 0.6) = 0.6; pair 2: 0.5 * (0.5 - 0.5 * (-1.5)) = 0.625
    expected = [-log_sigmoid(0.6), -log_sigmoid(0.625)]
    kl_w, kl_l = KL_W.clone().requires_grad_(), KL_L.clone().requires_grad_()
    got = tdpo_loss(PC, PR, RC, RR, kl_w, kl_l, beta, alpha, version=2)
    torch.testing.assert_close(got, T(*expected), rtol=1e-12, atol=0)
    got.sum().backward()
    sig = lambda x: 1 / (1 + math.exp(-x))
    torch.testing.assert_close(kl_l.grad, T(alpha * beta * sig(-0.6), alpha * beta * sig(-0.625)), rtol=1e-12, atol=0)
    assert kl_w.grad is None  # detached inside: no path back to it
    # with no KL at all, TDPO is DPO
    zero = torch.zeros(2, dtype=torch.float64)
    torch.testing.assert_close(tdpo_loss(PC, PR, RC, RR, zero, zero, beta), dpo_loss(PC, PR, RC, RR, beta), rtol=1e-12,
                               atol=0)
    with pytest.raises(ValueError, match="version must be 1 or 2"):
        tdpo_loss(PC, PR, RC, RR, KL_W, KL_L, beta, version=3)


def test_odpo_asks_the_margin_to_exceed_the_offset():
    beta, offset = 0.5, T(0.3, -0.2)  # margins beta * logits: 0.75 and 0.25
    expected = [-log_sigmoid(0.75 - 0.3), -log_sigmoid(0.25 + 0.2)]
    torch.testing.assert_close(dpo_loss(PC, PR, RC, RR, beta, offset=offset), T(*expected), rtol=1e-12, atol=0)
    torch.testing.assert_close(dpo_loss(PC, PR, RC, RR, beta, offset=0.0), dpo_loss(PC, PR, RC, RR, beta), rtol=0,
                               atol=0)


def test_the_offset_is_alpha_times_the_log_or_the_linear_reward_gap():
    chosen, rejected = T(1.0, 0.3, 0.9), T(0.0, 0.2, -math.inf)  # gaps 1, 0.1 and none (a failed reward)
    torch.testing.assert_close(reward_offset(chosen, rejected, 2.0, "log"), T(0.0, 2 * math.log(0.1), 0.0),
                               rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(reward_offset(chosen, rejected, 2.0, "linear"), T(2.0, 0.2, 0.0), rtol=1e-12,
                               atol=1e-15)
    with pytest.raises(ValueError, match="chosen score above its rejected"):
        reward_offset(T(0.5), T(0.5))
    with pytest.raises(ValueError, match="scale must be"):
        reward_offset(T(1.0), T(0.0), 1.0, "ratio")


def test_hinge_stops_once_the_margin_reaches_one_over_beta():
    # 1 - 0.5 * 1.5 = 0.25, 1 - 0.5 * 0.5 = 0.75; at beta 2 both margins are past 1
    torch.testing.assert_close(hinge_loss(PC, PR, RC, RR, 0.5), T(0.25, 0.75), rtol=1e-12, atol=0)
    pc = PC.clone().requires_grad_()
    hinge_loss(pc, PR, RC, RR, 2.0).sum().backward()
    assert hinge_loss(PC, PR, RC, RR, 2.0).tolist() == [0.0, 0.0] and pc.grad.tolist() == [0.0, 0.0]


def test_bco_pair_classifies_each_completion_against_the_reward_shift():
    beta, delta = 0.5, 0.2
    # implicit rewards: chosen 0.5 * 1 = 0.5 (both pairs), rejected 0.5 * -0.5 = -0.25 and 0.5 * 0.5 = 0.25
    expected = [-log_sigmoid(0.5 - 0.2) - log_sigmoid(0.25 + 0.2), -log_sigmoid(0.5 - 0.2) - log_sigmoid(-(0.25 - 0.2))]
    torch.testing.assert_close(bco_pair_loss(PC, PR, RC, RR, beta, delta), T(*expected), rtol=1e-12, atol=0)
    # unlike DPO, moving both completions' rewards up by the same amount changes the loss
    assert bco_pair_loss(PC + 1, PR + 1, RC, RR, beta, delta).sum() != bco_pair_loss(PC, PR, RC, RR, beta, delta).sum()
