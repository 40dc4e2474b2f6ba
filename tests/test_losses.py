"""Policy losses, KL, entropy, aggregation: against numbers computed by hand."""

import math

import pytest
import torch

from aha.algorithms import (
    LOG_RATIO_CLAMP,
    LossNorm,
    aggregate,
    cispo_loss,
    clamped_log_ratio,
    clipped_surrogate,
    clipped_value_loss,
    entropy_from_logits,
    gspo_surrogate,
    kl_estimate,
    policy_gradient_loss,
    sequence_log_ratio,
    truncated_is_weights,
)


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
    kl = kl_estimate(torch.log(torch.tensor([0.5, 0.3])), torch.log(torch.tensor([0.25, 0.3])), "k3")
    # log r = log(.25/.5) = -ln 2: k3 = .5 + ln 2 - 1; equal probabilities: 0
    torch.testing.assert_close(kl, torch.tensor([0.5 + math.log(2) - 1, 0.0]))


def test_dual_clip_caps_negative_advantage_loss():
    logp = torch.log(torch.tensor([5.0, 5.0, 2.0]))
    adv = torch.tensor([-1.0, 1.0, -1.0])
    loss, clipped = clipped_surrogate(logp, torch.zeros(3), adv, 0.2, 0.2, dual_clip=3.0)
    # ratio 5, A=-1: PPO loss 5, capped at 3. A=+1: clipped at 1.2. ratio 2, A=-1: 2 < 3 kept
    torch.testing.assert_close(loss, torch.tensor([3.0, -1.2, 2.0]))
    assert clipped.tolist() == [True, True, False]
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        clipped_surrogate(logp, torch.zeros(3), adv, dual_clip=0.5)


def test_extreme_ratios_stay_finite():
    logp = torch.tensor([30.0, -30.0], requires_grad=True)
    loss, clipped = clipped_surrogate(logp, torch.zeros(2), torch.tensor([1.0, 1.0]), 0.2, 0.28)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and clipped.tolist() == [True, False]
    # the capped token has no gradient; the tiny-ratio one has gradient -ratio * A ~ 0
    assert logp.grad[0] == 0 and abs(float(logp.grad[1])) < 1e-12


def test_gspo_ratio_is_per_sequence_and_gradient_is_length_normalised():
    old = torch.zeros(2, 3)
    logp = torch.tensor([[0.3, -0.1, 0.4], [0.0, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([[1.0], [-1.0]])
    loss, clipped = gspo_surrogate(logp, old, adv, mask, clip_low=0.5, clip_high=0.5)
    s = math.exp((0.3 - 0.1) / 2)  # padding (0.4) is ignored
    torch.testing.assert_close(loss[0, :2], torch.tensor([-s, -s]))
    torch.testing.assert_close(loss[1], torch.tensor([1.0, 1.0, 1.0]))
    aggregate(loss, mask, "seq_mean_token_mean", LossNorm.of(mask, 3)).backward()
    # d/dlogp_t of mean_i (1/|y_i|) sum_t -s_i A_i = -s_i A_i / (2 |y_i|)
    torch.testing.assert_close(logp.grad, torch.tensor([[-s / 4, -s / 4, 0.0], [1 / 6, 1 / 6, 1 / 6]]))
    # one clip decision per sequence
    loss, clipped = gspo_surrogate(logp, old, adv, mask, clip_low=0.01, clip_high=0.01)
    assert clipped[0, :2].tolist() == [True, True] and not clipped[1].any()


def test_cispo_keeps_gradient_of_clipped_tokens_with_capped_weight():
    logp = torch.log(torch.tensor([2.0, 1.1])).requires_grad_()
    loss, clipped = cispo_loss(logp, torch.zeros(2), torch.tensor([1.0, 1.0]), clip_low=1.0, clip_high=0.28)
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([-1.28, -1.1]))  # PPO would give 0 for token 0
    torch.testing.assert_close(loss.detach(), -torch.tensor([1.28, 1.1]) * logp.detach())
    assert clipped.tolist() == [True, False]


def test_policy_gradient_loss():
    logp = torch.log(torch.tensor([0.5, 0.25])).requires_grad_()
    loss, _ = policy_gradient_loss(logp, torch.tensor([2.0, -1.0]))
    torch.testing.assert_close(loss.detach(), torch.tensor([2 * math.log(2), -2 * math.log(2)]))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([-2.0, 1.0]))


def test_kl_estimators_by_hand_and_against_exact_kl():
    logp, ref = torch.log(torch.tensor([0.5])), torch.log(torch.tensor([0.25]))
    lr = math.log(0.5)
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), torch.tensor([-lr]))
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), torch.tensor([0.5 * lr**2]))
    torch.testing.assert_close(kl_estimate(logp, ref, "k3"), torch.tensor([0.5 - lr - 1]))
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        kl_estimate(logp, ref, "k4")
    # k1 and k3 are unbiased: their expectation under p is the exact KL(p || q)
    p, q = torch.tensor([0.6, 0.3, 0.1]), torch.tensor([0.2, 0.5, 0.3])
    exact = float((p * (p / q).log()).sum())
    for kind in ("k1", "k3"):
        assert float((p * kl_estimate(p.log(), q.log(), kind)).sum()) == pytest.approx(exact, rel=1e-5)


def test_entropy_from_logits():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [1.0, 1e-30, 1e-30]]))
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([1.5 * math.log(2), 0.0]), atol=1e-6, rtol=0)


def test_truncated_is_weights():
    w = truncated_is_weights(torch.log(torch.tensor([0.5, 0.9])), torch.log(torch.tensor([0.25, 0.9])), cap=1.5)
    torch.testing.assert_close(w, torch.tensor([1.5, 1.0]))  # ratio 2 capped at 1.5


def test_clipped_value_loss():
    values, old, returns = torch.tensor([1.0, 0.5, 0.0]), torch.tensor([0.0, 0.4, 0.0]), torch.tensor([1.0, 0.0, 1.0])
    loss, clipped = clipped_value_loss(values, old, returns, clip=0.2)
    # v moved 0 -> 1, clipped to .2: max(0, .64) = .64. .4 -> .5 inside clip. unchanged: 1.
    torch.testing.assert_close(loss, 0.5 * torch.tensor([0.64, 0.25, 1.0]))
    assert clipped.tolist() == [True, False, False]


def test_aggregation_modes_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    norm = LossNorm.of(mask, constant=5)
    expected = {"token_mean": 10 / 4, "seq_mean_token_sum": (6 + 4) / 2,
                "seq_mean_token_mean": (2 + 4) / 2, "constant": 10 / (2 * 5)}
    for mode, value in expected.items():
        torch.testing.assert_close(aggregate(values, mask, mode, norm), torch.tensor(value), msg=mode)
        # split into micro-batches with the full batch's normaliser: same total
        parts = aggregate(values[:1], mask[:1], mode, norm) + aggregate(values[1:], mask[1:], mode, norm)
        torch.testing.assert_close(parts, torch.tensor(value), msg=mode)
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate(values, mask, "mean", norm)


def test_all_masked_rows_contribute_nothing():
    values, mask = torch.tensor([[5.0, 5.0]]), torch.zeros(1, 2)
    for mode in ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant"):
        assert float(aggregate(values, mask, mode, LossNorm.of(mask, 2))) == 0.0


# --- guards: clamped log-ratios, padding selected away, shapes checked

def test_log_ratio_is_clamped_before_exp_so_an_overflowing_ratio_stays_finite():
    # exp(89) overflows float32; clamped at 20 as in verl / OpenRLHF
    assert LOG_RATIO_CLAMP == 20.0 and math.isinf(float(torch.exp(torch.tensor(89.0))))
    e20 = math.exp(20.0)
    logp = torch.tensor([89.0, 89.0, 0.1, -89.0], requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, clipped = clipped_surrogate(logp, torch.zeros(4), adv, clip_low=0.2, clip_high=0.28)
    loss.sum().backward()
    # ratio e^20, A=+1: clipped at 1.28. e^20, A=-1: the pessimistic e^20 * |A| is kept.
    # e^0.1 inside the clip. e^-20, A=-1: the floor 0.8 binds.
    torch.testing.assert_close(loss.detach(), torch.tensor([-1.28, e20, -math.exp(0.1), 0.8]))
    assert clipped.tolist() == [True, False, False, True]
    # no gradient through the clamp; inside it the usual -ratio * A
    torch.testing.assert_close(logp.grad, torch.tensor([0.0, 0.0, -math.exp(0.1), 0.0]))
    assert torch.isfinite(logp.grad).all()


def test_cispo_gspo_kl_and_is_weights_clamp_the_log_ratio():
    e20 = math.exp(20.0)
    logp = torch.tensor([89.0, 0.0], requires_grad=True)
    loss, clipped = cispo_loss(logp, torch.zeros(2), torch.tensor([1.0, 1.0]), clip_low=1.0, clip_high=0.28)
    loss.sum().backward()
    torch.testing.assert_close(loss.detach(), torch.tensor([-1.28 * 89.0, 0.0]))  # weight min(e^20, 1.28)
    torch.testing.assert_close(logp.grad, torch.tensor([-1.28, -1.0]))
    assert clipped.tolist() == [True, False]
    # GSPO: a sequence ratio of e^89 (mean log-ratio 89) is e^20, pessimistic for A < 0
    seq = torch.tensor([[89.0, 89.0]], requires_grad=True)
    loss, _ = gspo_surrogate(seq, torch.zeros(1, 2), torch.tensor([[-1.0]]), torch.ones(1, 2))
    loss.sum().backward()
    torch.testing.assert_close(loss.detach(), torch.tensor([[e20, e20]]))
    assert torch.equal(seq.grad, torch.zeros(1, 2))
    # KL estimators: log r = ref - logp clamped to +-20 for each of k1, k2, k3
    logp = torch.zeros(2, requires_grad=True)
    ref = torch.tensor([89.0, -89.0])
    expected = {"k1": [-20.0, 20.0], "k2": [200.0, 200.0], "k3": [e20 - 21.0, math.exp(-20.0) + 19.0]}
    for kind, values in expected.items():
        logp.grad = None
        kl = kl_estimate(logp, ref, kind)
        kl.sum().backward()
        torch.testing.assert_close(kl.detach(), torch.tensor(values), msg=kind)
        assert torch.equal(logp.grad, torch.zeros(2)), kind
    assert truncated_is_weights(torch.tensor([89.0]), torch.tensor([0.0]), cap=2.0).tolist() == [2.0]
    torch.testing.assert_close(clamped_log_ratio(torch.tensor([89.0, -89.0, 0.5]), torch.zeros(3)),
                               torch.tensor([20.0, -20.0, 0.5]))


def test_aggregate_ignores_nan_and_inf_on_padding_in_value_and_gradient():
    nan, inf = float("nan"), float("inf")
    values = torch.tensor([[1.0, 2.0, nan], [4.0, inf, -inf]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    norm = LossNorm.of(mask, constant=5)
    expected = {"token_mean": 7 / 3, "seq_mean_token_sum": 7 / 2, "seq_mean_token_mean": (1.5 + 4) / 2,
                "constant": 7 / 10}
    for mode, value in expected.items():
        values.grad = None
        out = aggregate(values, mask, mode, norm)
        out.backward()
        torch.testing.assert_close(out.detach(), torch.tensor(value), msg=mode)
        assert torch.isfinite(values.grad).all() and (values.grad[~mask.bool()] == 0).all(), mode
    # the sequence log-ratio of GSPO, too
    logp = torch.tensor([[0.2, 0.4, nan]])
    torch.testing.assert_close(sequence_log_ratio(logp, torch.zeros(1, 3), torch.tensor([[1.0, 1.0, 0.0]])),
                               torch.tensor([[0.3]]))


def test_shapes_that_would_broadcast_silently_are_rejected():
    logp, old = torch.zeros(3, 3), torch.zeros(3, 3)  # N == T: (N,) advantages would broadcast along rows
    message = r"advantages must be shaped \(3, 3\) or \(3, 1\) like logprobs, got \(3,\)"
    for fn in (lambda a: clipped_surrogate(logp, old, a), lambda a: cispo_loss(logp, old, a),
               lambda a: policy_gradient_loss(logp, a), lambda a: gspo_surrogate(logp, old, a, torch.ones(3, 3))):
        with pytest.raises(ValueError, match=message):
            fn(torch.zeros(3))
        fn(torch.zeros(3, 1))  # one per sequence
        fn(torch.zeros(3, 3))  # one per token
    with pytest.raises(ValueError, match=r"advantages must be shaped \(3, 3\) or \(3, 1\) like logprobs, got \(1, 3\)"):
        clipped_surrogate(logp, old, torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"old_logprobs must have the shape of logprobs \(3, 3\), got \(3, 1\)"):
        clipped_surrogate(logp, torch.zeros(3, 1), torch.zeros(3, 1))
    with pytest.raises(ValueError, match=r"ref_logprobs must have the shape of logprobs \(3, 3\), got \(3,\)"):
        kl_estimate(logp, torch.zeros(3))
    with pytest.raises(ValueError, match=r"values and mask must have the same shape, got values \(3, 3\) and mask "
                                         r"\(3,\)"):
        aggregate(logp, torch.ones(3), "token_mean", LossNorm(3.0, 3.0, 1.0))
