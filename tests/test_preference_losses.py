"""Preference losses against values computed by hand (math module, float64)."""

import math

import pytest
import torch

from aha.algorithms import (
    bradley_terry_loss,
    dpo_loss,
    ipo_loss,
    kto_loss,
    kto_reference_point,
    orpo_loss,
    preference_logits,
    simpo_loss,
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
