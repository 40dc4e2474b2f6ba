"""SAPO, GMPO and the engine-vs-trainer importance corrections (sequence-level IS, masked IS,
IcePop): by hand on 2x3 examples, against the peers' formulas re-derived here (verl's
core_algos.py and rollout_corr_helper.py, slime's loss.py) on random inputs with the edge
cases (groups with zero advantage, log-ratios of +-50, a row without valid tokens), wired
into the update and the batch preparation, and learning end to end on the tiny model."""

import copy
import math
import typing
from pathlib import Path

import pytest
import torch
from test_algorithm_runs import QUIET, say_seven
from test_training import metrics, tiny_config
from test_wiring import G, N, T, grads_of, logprobs_of, make_rollouts, noise, parts_for

from aha.algorithms import (
    IS_LEVELS,
    IS_MODES,
    LossNorm,
    aggregate,
    gmpo_loss,
    importance_weights,
    outside_fractions,
    sapo_loss,
    truncated_is_weights,
)
from aha.config import AlgorithmConfig, Config, ConfigError, RolloutConfig
from aha.models import load
from aha.training.loop import train
from aha.training.rl.batch import Batch
from aha.training.rl.update import Learner, Shape, policy_update

sigmoid = lambda x: 1.0 / (1.0 + math.exp(-x))


# ---------------------------------------------------------------- by hand, 2 x 3


def test_sapo_by_hand_value_gradient_and_damped_tokens():
    ratios = torch.tensor([[1.0, 2.0, 0.5], [1.0, 3.0, 0.5]])
    logp = torch.log(ratios).requires_grad_()
    adv = torch.tensor([[1.0], [-1.0]])
    loss, clipped = sapo_loss(logp, torch.zeros(2, 3), adv, tau_pos=1.0, tau_neg=2.0)
    # row 0 (A = +1, tau 1): -(4/1) sigmoid(r - 1);  row 1 (A = -1, tau 2): +(4/2) sigmoid(2 (r - 1))
    s = sigmoid
    expected = torch.tensor([[-2.0, -4 * s(1.0), -4 * s(-0.5)], [1.0, 2 * s(4.0), 2 * s(-1.0)]])
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(loss, torch.tensor([[-2.0, -2.9242344, -1.5101627], [1.0, 1.9640276, 0.5378828]]))
    loss.sum().backward()
    # the paper's gradient: -A * 4 s (1 - s) * r per token, s = sigmoid(tau (r - 1)); -A at r = 1
    w = lambda x: 4 * s(x) * (1 - s(x))
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -w(1.0) * 2, -w(-0.5) * 0.5],
                                                        [1.0, w(4.0) * 3, w(-1.0) * 0.5]]))
    # the gate took more than half the gradient only at r = 3 with tau 2 (4 s (1 - s) = 0.07)
    assert clipped.tolist() == [[False, False, False], [False, True, False]]
    with pytest.raises(ValueError, match="temperatures must be > 0"):
        sapo_loss(logp, torch.zeros(2, 3), adv, tau_pos=0.0)


def test_gmpo_by_hand_value_gradient_and_clip():
    delta = torch.tensor([[0.1, 0.6, -0.3], [0.2, -0.7, 0.5]], requires_grad=True)  # log r
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv = torch.tensor([[1.0], [-1.0]])
    loss, clipped = gmpo_loss(delta, torch.zeros(2, 3), adv, mask, clip_low=0.4, clip_high=0.4)
    # row 0, A > 0: 0.6 capped at 0.4, mean (0.1 + 0.4 - 0.3) / 3; row 1, A < 0: -0.7 floored at
    # -0.4, padding 0.5 ignored, mean (0.2 - 0.4) / 2 = -0.1
    g0, g1 = math.exp(0.2 / 3), math.exp(-0.1)
    torch.testing.assert_close(loss, torch.tensor([[-g0, -g0, -g0], [g1, g1, g1]]))
    assert clipped.tolist() == [[False, True, False], [False, True, False]]
    total = aggregate(loss, mask, "seq_mean_token_mean", LossNorm.of(mask, 3))
    torch.testing.assert_close(total, torch.tensor((-g0 + g1) / 2))
    total.backward()
    # d/dlog r_t of mean_i(-A_i G_i) = -A_i G_i / (N |y_i|) for unclipped valid tokens, 0 otherwise
    torch.testing.assert_close(delta.grad, torch.tensor([[-g0 / 6, 0.0, -g0 / 6], [g1 / 4, 0.0, 0.0]]))


def test_importance_weights_by_hand_each_level_and_mode():
    ratios = torch.tensor([[2.0, 0.25, 1.5], [1.2, 3.0, 0.1]])
    trainer, engine = torch.log(ratios), torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # row 1's 0.1 is padding
    band = dict(cap=2.5, low=0.5)
    w, out = importance_weights(trainer, engine, mask, **band, level="token", mode="truncate")
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.5, 1.5], [1.2, 2.5, 0.5]]))
    assert out.tolist() == [[False, True, False], [False, True, False]]
    w, out = importance_weights(trainer, engine, mask, **band, level="token", mode="mask")  # IcePop
    torch.testing.assert_close(w, torch.tensor([[2.0, 0.0, 1.5], [1.2, 0.0, 0.0]]))
    assert outside_fractions(out, mask) == pytest.approx((2 / 5, 1.0))
    # per sequence: rho = 2 * 0.25 * 1.5 = 0.75 (inside), 1.2 * 3 = 3.6 (outside; padding ignored)
    w, out = importance_weights(trainer, engine, mask, **band, level="sequence", mode="truncate")
    torch.testing.assert_close(w, torch.tensor([[0.75] * 3, [2.5] * 3]))
    w, out = importance_weights(trainer, engine, mask, **band, level="sequence", mode="mask")  # Seq-MIS
    torch.testing.assert_close(w, torch.tensor([[0.75] * 3, [0.0] * 3]))
    assert out.tolist() == [[False] * 3, [True, True, False]]
    assert outside_fractions(out, mask) == pytest.approx((2 / 5, 1 / 2))
    assert outside_fractions(out, torch.zeros(2, 3)) == (0.0, 0.0)
    for bad in (dict(cap=2.0, low=2.0), dict(cap=1.0, low=-0.1)):
        with pytest.raises(ValueError, match="0 <= low < cap"):
            importance_weights(trainer, engine, mask, **bad)
    with pytest.raises(ValueError, match="unknown importance-sampling level"):
        importance_weights(trainer, engine, mask, 2.0, level="geometric")
    with pytest.raises(ValueError, match="unknown importance-sampling mode"):
        importance_weights(trainer, engine, mask, 2.0, mode="clip")


# ---------------------------------------------------------------- against the peers' formulas


def random_case(seed: int, rows: int = 8, width: int = 7):
    """Old log-probs, log-ratios around 0 with four at +-50, a mask whose row 3 is empty, and
    group advantages (groups of 4) of which the first group's are all zero (equal rewards)."""
    g = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(rows, width, generator=g)
    delta = 0.4 * torch.randn(rows, width, generator=g)
    delta[0, 1], delta[1, 0], delta[5, 1], delta[6, 0] = 50.0, -50.0, 50.0, -50.0
    lengths = torch.randint(2, width + 1, (rows,), generator=g)
    lengths[3] = 0
    mask = (torch.arange(width) < lengths.unsqueeze(1)).float()
    rewards = torch.cat([torch.ones(4), torch.rand(rows - 4, generator=g)])
    grouped = rewards.view(-1, 4)
    adv = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1, 1)
    return old, old + delta, adv, mask


def verl_sapo(old, logp, adv, mask, tau_pos, tau_neg):
    """verl compute_policy_loss_sapo re-derived: r = exp(clamp(logp - old, +-20)), the gate
    (4 / tau) sigmoid(tau (r - 1)) with tau by A > 0, then seq-mean-token-mean over the sequences
    that have a valid token (agg_loss)."""
    ratio = torch.exp(torch.clamp(logp - old, min=-20.0, max=20.0))
    tau = torch.where(adv > 0, torch.tensor(tau_pos), torch.tensor(tau_neg))
    per_token = -torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau) * adv
    count = mask.sum(dim=-1)
    per_seq = (per_token * mask).sum(dim=-1) / (count + 1e-8)
    return (per_seq * (count > 0)).sum() / (count > 0).sum()


def verl_geo_mean(old, logp, adv, mask, low, high):
    """verl compute_policy_loss_geo_mean (GMPO) re-derived, with aha's +-20 clamp of the log
    ratio (commented out there): sign-aware clip in log space, the masked mean of the kept log
    ratios per sequence, exp, times the sequence's mean advantage, averaged over all sequences."""
    log_ratio = torch.clamp(logp - old, -20.0, 20.0)
    sign = torch.sign(adv)
    kept = sign * torch.min(sign * log_ratio, sign * torch.clamp(log_ratio, -low, high))
    count = mask.sum(dim=-1)
    geo = torch.exp((kept * mask).sum(dim=-1) / (count + 1e-8))
    seq_adv = (adv * mask).sum(dim=-1) / (count + 1e-8)
    return torch.mean(-seq_adv * geo)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sapo_matches_verl_in_value_and_gradient(seed):
    old, logp, adv, mask = random_case(seed)
    ours_logp, theirs_logp = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    loss, _ = sapo_loss(ours_logp, old, adv, tau_pos=1.0, tau_neg=1.05)
    # aha's seq mean counts every row; verl's only rows with a valid token (here 7 of 8)
    ours = aggregate(loss, mask, "seq_mean_token_mean", LossNorm.of(mask, 7)) * 8 / 7
    theirs = verl_sapo(old, theirs_logp, adv, mask, 1.0, 1.05)
    torch.testing.assert_close(ours, theirs)
    ours.backward()
    theirs.backward()
    assert torch.isfinite(ours_logp.grad).all()
    torch.testing.assert_close(ours_logp.grad, theirs_logp.grad)
    assert (ours_logp.grad[:4] == 0).all() and (ours_logp.grad[3] == 0).all()  # zero advantage, empty row
    # the +-50 tokens: at r = e^20 the gate saturates (gradient exactly 0), at r = e^-20 it is ~r
    assert ours_logp.grad[5, 1] == 0 and abs(float(ours_logp.grad[6, 0])) < 1e-8


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_token", [False, True])
def test_gmpo_matches_verl_geo_mean_in_value_and_gradient(seed, per_token):
    old, logp, adv, mask = random_case(seed)
    if per_token:  # verl averages per-token advantages over the sequence; the per-token loss does the same
        adv = adv + 0.3 * torch.randn(old.shape, generator=torch.Generator().manual_seed(seed + 10))
    ours_logp, theirs_logp = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    loss, _ = gmpo_loss(ours_logp, old, adv, mask, clip_low=0.4, clip_high=0.4)
    ours = aggregate(loss, mask, "seq_mean_token_mean", LossNorm.of(mask, 7))
    theirs = verl_geo_mean(old, theirs_logp, adv, mask, 0.4, 0.4)
    torch.testing.assert_close(ours, theirs)
    ours.backward()
    theirs.backward()
    assert torch.isfinite(ours).all() and torch.isfinite(ours_logp.grad).all()
    torch.testing.assert_close(ours_logp.grad, theirs_logp.grad)
    assert (ours_logp.grad[3] == 0).all()  # the empty row
    if not per_token:
        assert (ours_logp.grad[:4] == 0).all()  # the group of equal rewards


def slime_icepop(trainer, engine, low, high):
    """slime icepop_function re-derived: k = exp(train - rollout); k inside [low, high], else 0."""
    k = torch.exp(trainer - engine)
    return torch.where((k >= low) & (k <= high), k, torch.zeros_like(k))


def slime_tis(trainer, engine, low, high):
    """slime vanilla_tis_function re-derived: clamp(exp(train - rollout), low, high)."""
    return torch.clamp(torch.exp(trainer - engine), min=low, max=high)


def verl_sequence_is(trainer, engine, mask, cap, keep_low=None, keep_high=None):
    """verl compute_rollout_correction_weights(rollout_is="sequence") re-derived: exp of the
    clamped (+-20) masked sum of log ratios, truncated at cap, zero on padding; with a keep band,
    times compute_rollout_rejection_mask's seq_sum_k1 mask (k1 = -log rho; lower/upper bounds on
    1/rho), which is sequence-level masked IS."""
    total = ((trainer - engine) * mask).sum(dim=-1, keepdim=True)
    weights = torch.exp(torch.clamp(total, -20.0, 20.0)).expand_as(trainer) * mask
    weights = weights.clamp(max=cap)
    if keep_high is not None:
        k1 = -torch.clamp(total, -20.0, 20.0)
        keep = (k1 >= math.log(1 / keep_high)) & (k1 <= math.log(1 / keep_low))
        weights = weights * keep
    return weights


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_importance_weights_match_slime_and_verl(seed):
    _, trainer, _, mask = random_case(seed)
    engine = trainer - 0.3 * torch.randn(trainer.shape, generator=torch.Generator().manual_seed(seed + 20))
    engine[2, 1], engine[4, 0] = trainer[2, 1] + 50.0, trainer[4, 0] - 50.0  # rho = e^-50, e^50
    valid = mask.bool()
    cases = [
        (dict(cap=2.0), truncated_is_weights(trainer, engine, 2.0)),  # aha's TIS, unchanged
        (dict(cap=2.0, low=0.5), slime_tis(trainer, engine, 0.5, 2.0)),
        (dict(cap=5.0, low=0.5, mode="mask"), slime_icepop(trainer, engine, 0.5, 5.0)),  # IcePop
        (dict(cap=3.0, level="sequence"), verl_sequence_is(trainer, engine, mask, 3.0)),  # Seq-TIS
        (dict(cap=3.0, low=0.4, level="sequence", mode="mask"),  # Seq-MIS
         verl_sequence_is(trainer, engine, mask, 3.0, keep_low=0.4, keep_high=3.0)),
    ]
    for kwargs, expected in cases:
        weights, outside = importance_weights(trainer, engine, mask, **kwargs)
        assert torch.isfinite(weights).all() and not weights.requires_grad
        torch.testing.assert_close(weights[valid], expected[valid], rtol=1e-5, atol=0)
        # outside the band: truncated to an end, or masked; never a padding position
        assert not (outside & ~valid).any()
    # the default is exactly the token-level truncation aha had
    assert torch.equal(importance_weights(trainer, engine, mask, 2.0)[0], truncated_is_weights(trainer, engine, 2.0))
    seq_weights, _ = importance_weights(trainer, engine, mask, 3.0, level="sequence")
    assert (seq_weights[3] == 1.0).all()  # an empty row's product is 1 (and it has no loss to weigh)


# ---------------------------------------------------------------- config


def test_the_configs_is_levels_and_modes_are_the_functions():
    fields = AlgorithmConfig.model_fields
    assert typing.get_args(fields["is_level"].annotation) == IS_LEVELS
    assert typing.get_args(fields["is_mode"].annotation) == IS_MODES


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.is_mode=mask"], "is_level / is_mode / is_low shape the importance weights of algorithm.tis_cap"),
    (["algorithm.is_level=sequence"], "set tis_cap"),
    (["algorithm.old_logprobs=trainer", "algorithm.is_low=0.5"], "set tis_cap"),
    (["algorithm.old_logprobs=trainer", "algorithm.tis_cap=2.0", "algorithm.is_low=2.0"],
     r"algorithm.is_low \(2.0\) must be below algorithm.tis_cap \(2.0\)"),
    (["algorithm.sapo_tau_neg=0"], "sapo_tau_neg"),
])
def test_inconsistent_correction_settings_are_rejected_at_load(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(tmp_path, "bad", *overrides)


# ---------------------------------------------------------------- wired into the update and the batch


@pytest.fixture(scope="module")
def tiny():
    return load("tiny", seed=0)


def written_out(policy_loss, logp, old, adv, mask, low, high, tau_pos, tau_neg):
    """The two losses from their papers' formulas, aggregated seq-mean-token-mean, for the update test."""
    if policy_loss == "sapo":
        tau = torch.where(adv > 0, tau_pos, tau_neg)
        per_token = -(4 / tau) * torch.sigmoid(tau * (torch.exp(logp - old) - 1)) * adv
    else:
        sign = torch.sign(adv)
        log_ratio = logp - old
        kept = torch.where(sign > 0, torch.minimum(log_ratio, torch.full_like(log_ratio, high)),
                           torch.where(sign < 0, torch.maximum(log_ratio, torch.full_like(log_ratio, -low)), 0.0))
        geo = torch.exp((kept * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True))
        per_token = -adv * geo
    return ((per_token * mask).sum(dim=1) / mask.sum(dim=1)).mean()


@pytest.mark.parametrize("policy_loss", ["sapo", "gmpo"])
def test_update_applies_the_configured_loss_and_its_keys(tiny, policy_loss):
    """Off-policy (ratios ~[0.5, 2]) with per-token advantages and keys away from their
    defaults: the logged loss and every parameter gradient are the loss written out here."""
    algo = AlgorithmConfig(policy_loss=policy_loss, loss_agg="seq_mean_token_mean", clip_low=0.15, clip_high=0.3,
                           sapo_tau_pos=0.7, sapo_tau_neg=2.5)
    ro = make_rollouts(len(tiny.tokenizer))
    mask = ro.completion_mask
    model = copy.deepcopy(tiny.model)
    with torch.no_grad():
        current = logprobs_of(model, ro)
    old = (current - noise(1, -0.2, 0.2, (N, 1)) - noise(2, -0.55, 0.55)) * mask
    adv = torch.randn(N, T, generator=torch.Generator().manual_seed(3)) * mask
    batch = Batch(ro, torch.zeros(N), old_logprobs=old, advantages=adv)
    expected_model = copy.deepcopy(model)
    expected = written_out(policy_loss, logprobs_of(expected_model, ro), old, adv, mask, 0.15, 0.3, 0.7, 2.5)
    expected.backward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: read the gradient, keep the weights
    result = policy_update(Learner(model, optimizer), batch, algo, Shape(G, 4, True, 1.0, torch.float32), 1e9, T)
    assert result["loss/policy"] == pytest.approx(float(expected.detach()), abs=1e-6, rel=1e-5)
    assert 0 < result["policy/clip_frac"] < 1
    for got, want in zip(grads_of(model), grads_of(expected_model)):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


@pytest.mark.parametrize("level, mode, low, cap", [("sequence", "mask", 0.0, 1.3), ("token", "mask", 0.8, 1.25),
                                                   ("sequence", "truncate", 0.7, 1.3)])
def test_prepare_weights_tokens_by_the_configured_correction_and_logs_its_share(tiny, level, mode, low, cap):
    from aha.training.rl.step import prepare

    ro = make_rollouts(len(tiny.tokenizer), seed=11)
    mask = ro.completion_mask
    policy = copy.deepcopy(tiny.model)
    with torch.no_grad():
        trainer = logprobs_of(policy, ro)
    engine = (trainer + noise(12, -0.4, 0.4)) * mask
    ro.sampling_logprobs = engine
    config = Config(model="tiny", rollout=RolloutConfig(group_size=G), algorithm=AlgorithmConfig(
        old_logprobs="trainer", tis_cap=cap, is_low=low, is_level=level, is_mode=mode))
    learner = Learner(policy, torch.optim.SGD(policy.parameters(), lr=0.0))
    batch, stats = prepare(parts_for(config, learner), Batch(ro, torch.tensor([1.0, 0, 0.5, 0.25, 0, 1, 1, 0])))
    valid = mask.bool()
    rho = torch.exp(trainer - engine)
    if level == "sequence":
        rho = torch.exp(((trainer - engine) * mask).sum(dim=1, keepdim=True)).expand(N, T)
    outside = ((rho < low) | (rho > cap)) & valid
    expected = torch.where(outside, 0.0, rho) if mode == "mask" else rho.clamp(low, cap)
    torch.testing.assert_close(batch.is_weights[valid], expected[valid], atol=1e-5, rtol=1e-5)
    kind = "masked" if mode == "mask" else "truncated"
    token_frac = float(outside.sum() / valid.sum())
    seq_frac = float(outside.any(dim=1).float().mean())
    assert 0 < token_frac < 1 and 0 < seq_frac < 1  # the band matters in this batch
    assert stats[f"is/{kind}_frac"] == pytest.approx(token_frac, abs=1e-6)
    assert stats[f"is/{kind}_seq_frac"] == pytest.approx(seq_frac, abs=1e-6)
    assert stats["is/weight_mean"] == pytest.approx(float(expected[valid].mean()), abs=1e-5)


# ---------------------------------------------------------------- end to end on the tiny model


@pytest.mark.parametrize("overrides", [
    ["algorithm.policy_loss=sapo", "algorithm.loss_agg=seq_mean_token_mean", "algorithm.mini_batches=2"],
    ["algorithm.policy_loss=gmpo", "algorithm.loss_agg=seq_mean_token_mean", "algorithm.mini_batches=2",
     "algorithm.clip_low=0.4", "algorithm.clip_high=0.4"],
    ["algorithm.old_logprobs=trainer", "algorithm.tis_cap=2.0", "algorithm.is_level=sequence",
     "algorithm.is_mode=mask"],
    ["algorithm.old_logprobs=trainer", "algorithm.tis_cap=5.0", "algorithm.is_low=0.5", "algorithm.is_mode=mask"],
], ids=["sapo", "gmpo", "seq_mis", "icepop"])
def test_each_new_loss_and_correction_learns(tmp_path, overrides):
    summary = train(say_seven(tmp_path, *overrides), echo=QUIET)
    records = metrics(Path(summary.run_dir))
    hits = [r["reward/mean"] for r in records if "reward/mean" in r]
    first, last = sum(hits[:3]) / 3, sum(hits[-5:]) / 5
    assert first < 0.1  # a random model rarely says "7"
    assert last > 3 * first  # samples say it more often...
    assert summary.accuracy_after > 0.5  # ...and the greedy answer is mostly 7s
    if "algorithm.is_mode=mask" in overrides:  # fp32 on both sides: every ratio ~1, inside the band
        assert all(r["is/masked_frac"] == 0 and r["is/masked_seq_frac"] == 0 for r in records if "loss/total" in r)


def test_a_band_that_excludes_every_ratio_masks_every_token_and_trains_nothing(tmp_path):
    """The real loop: the engine and the trainer agree (ratio ~1), the band [1.5, 2] excludes
    it, so every token is masked, the share logged is 1, and no gradient reaches the policy."""
    config = tiny_config(tmp_path, "masked", "train.dtype=float32", "algorithm.old_logprobs=trainer",
                         "algorithm.tis_cap=2.0", "algorithm.is_low=1.5", "algorithm.is_mode=mask",
                         "train.steps=2", "eval.before=false", "eval.after=false")
    for r in metrics(Path(train(config, echo=QUIET).run_dir)):
        assert r["is/masked_frac"] == 1.0 and r["is/masked_seq_frac"] == 1.0 and r["is/weight_mean"] == 0.0
        assert r["grad_norm"] == 0.0 and r["loss/policy"] == 0.0
