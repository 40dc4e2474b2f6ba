"""aha's preference losses against TRL's, restated here as TRL computes them.

TRL read from github.com/huggingface/trl:
- HEAD = f2cd57710ae345ea6428ae95363267fcf38a3dc8 (trl 1.10.0.dev0, 2026-07-24)
- v0.28.0 = 49ef33428c47235991acb4e185ea599b70c6dab4 (2026-02-10), the last release whose DPO "sigmoid"
  loss still takes label_smoothing (cDPO); the DPO refactor (#3906, first released in v0.29.0) dropped it
  there, and at HEAD only the "robust", "exo_pair", "aot" and "aot_unpaired" losses read label_smoothing.

Each TRL restatement below keeps TRL's argument conventions (SimPO's gamma enters as simpo_gamma / beta
inside beta * (...), ORPO's nll minus mean of beta * log sigma(log odds), KTO's clamped detached KL and
desirable/undesirable weights, ...) and is compared with aha's function on seeded float64 inputs. TRL's
own dtype casts (ORPO's .float()) are left out so the comparison can be tight; they are precision choices,
not part of the formula. Everything is reduced the way TRL reduces it (a mean over the batch) where aha
returns per-pair losses.

TRL has neither TDPO nor ODPO: those two are checked against their authors' code (commits named there).
"""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from aha.algorithms.preference import (
    bco_pair_loss,
    bradley_terry_loss,
    dpo_loss,
    hinge_loss,
    ipo_loss,
    kto_loss,
    kto_reference_point,
    orpo_loss,
    reward_offset,
    simpo_loss,
    tdpo_loss,
    token_kl,
)

N = 64
TIGHT = dict(rtol=1e-12, atol=1e-12)
BETAS = [0.01, 0.1, 0.5, 2.0]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These tensors are tiny: on a busy machine, waking torch's thread pool costs milliseconds per op."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _summed_logps(g, n=N, lo=-80.0, hi=-1.0):
    """Sequence log-probs summed over tokens: negative, of a few tens."""
    return lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)


def _pairs(seed):
    g = _gen(seed)
    pc, pr, rc, rr = (_summed_logps(g) for _ in range(4))
    return pc, pr, rc, rr


# ---------------------------------------------------------------------------------------------------------
# DPO
# ---------------------------------------------------------------------------------------------------------

def trl_head_dpo_sigmoid(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    # TRL HEAD trl/trainer/dpo_trainer.py, DPOTrainer._compute_loss (lines 1397-1435; batch mean at line 1578),
    # f_divergence_type="reverse_kl", loss_type=["sigmoid"], use_weighting=False. No label_smoothing here.
    chosen_logratios = chosen_logps - ref_chosen_logps
    rejected_logratios = rejected_logps - ref_rejected_logps
    chosen_scores, rejected_scores = chosen_logratios, rejected_logratios
    delta_score = chosen_scores - rejected_scores
    per_sequence_loss = -F.logsigmoid(beta * delta_score)
    return per_sequence_loss


def trl_v028_dpo_sigmoid(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta,
                         label_smoothing):
    # TRL v0.28.0 trl/trainer/dpo_trainer.py, DPOTrainer.dpo_loss (lines 1130-1156), loss_type="sigmoid",
    # reference_free=False, f_divergence_type=REVERSE_KL: the conservative DPO (cDPO) form.
    logratios = chosen_logps - rejected_logps
    ref_logratios = ref_chosen_logps - ref_rejected_logps
    logits = logratios - ref_logratios
    losses = (
        -F.logsigmoid(beta * logits) * (1 - label_smoothing)
        - F.logsigmoid(-beta * logits) * label_smoothing
    )
    return losses


@pytest.mark.parametrize("beta", BETAS)
def test_dpo_matches_trl_head_sigmoid(beta):
    # TRL HEAD f2cd577 trl/trainer/dpo_trainer.py DPOTrainer._compute_loss, loss_type="sigmoid".
    pc, pr, rc, rr = _pairs(1)
    ours = dpo_loss(pc, pr, rc, rr, beta=beta)
    assert_close(ours, trl_head_dpo_sigmoid(pc, pr, rc, rr, beta), **TIGHT)
    assert_close(ours.mean(), trl_head_dpo_sigmoid(pc, pr, rc, rr, beta).mean(), **TIGHT)


@pytest.mark.parametrize("beta,label_smoothing", list(itertools.product(BETAS, [0.0, 0.05, 0.2, 0.45])))
def test_cdpo_matches_trl_v028_sigmoid_with_label_smoothing(beta, label_smoothing):
    # TRL v0.28.0 (49ef334) trl/trainer/dpo_trainer.py DPOTrainer.dpo_loss, loss_type="sigmoid" with
    # label_smoothing (cDPO). TRL HEAD's "sigmoid" ignores label_smoothing; the same expression lives on
    # at HEAD only in the "aot" losses (dpo_trainer.py lines 1494-1512), applied to sorted margins.
    pc, pr, rc, rr = _pairs(2)
    ours = dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=label_smoothing)
    assert_close(ours, trl_v028_dpo_sigmoid(pc, pr, rc, rr, beta, label_smoothing), **TIGHT)


@pytest.mark.parametrize("beta,label_smoothing", [(0.1, 0.0), (0.5, 0.0), (0.1, 0.1), (2.0, 0.3)])
def test_dpo_gradients_match_trl(beta, label_smoothing):
    # Gradients of TRL's batch loss (per_sequence_loss.mean(), dpo_trainer.py line 1578 at HEAD;
    # losses.mean() in v0.28.0) w.r.t. the policy's chosen and rejected log-probs.
    pc0, pr0, rc, rr = _pairs(3)

    def grads(fn):
        pc, pr = pc0.clone().requires_grad_(True), pr0.clone().requires_grad_(True)
        return torch.autograd.grad(fn(pc, pr).mean(), (pc, pr))

    ours = grads(lambda pc, pr: dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=label_smoothing))
    trl = grads(lambda pc, pr: trl_v028_dpo_sigmoid(pc, pr, rc, rr, beta, label_smoothing))
    for a, b in zip(ours, trl):
        assert_close(a, b, **TIGHT)
    if label_smoothing == 0.0:
        head = grads(lambda pc, pr: trl_head_dpo_sigmoid(pc, pr, rc, rr, beta))
        for a, b in zip(ours, head):
            assert_close(a, b, **TIGHT)
    # the analytic DPO gradient: d/d pc of mean(-log sigma(beta m)) = -beta sigma(-beta m) / N (ls = 0)
    if label_smoothing == 0.0:
        m = (pc0 - rc) - (pr0 - rr)
        assert_close(ours[0], -beta * torch.sigmoid(-beta * m) / N, **TIGHT)
        assert_close(ours[1], beta * torch.sigmoid(-beta * m) / N, **TIGHT)


# ---------------------------------------------------------------------------------------------------------
# IPO
# ---------------------------------------------------------------------------------------------------------

def trl_head_dpo_ipo(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, completion_mask, beta):
    # TRL HEAD trl/trainer/dpo_trainer.py, DPOTrainer._compute_loss (lines 1440-1451), loss_type="ipo":
    # summed log-ratios divided by each completion's token count, then (delta - 1/(2 beta))^2.
    chosen_scores = chosen_logps - ref_chosen_logps
    rejected_scores = rejected_logps - ref_rejected_logps
    chosen_mask, rejected_mask = completion_mask.chunk(2, dim=0)
    chosen_avg_score = chosen_scores / chosen_mask.sum(dim=1).clamp(min=1.0)
    rejected_avg_score = rejected_scores / rejected_mask.sum(dim=1).clamp(min=1.0)
    ipo_delta = chosen_avg_score - rejected_avg_score
    return (ipo_delta - 1 / (2 * beta)) ** 2


def trl_v028_dpo_ipo(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    # TRL v0.28.0 trl/trainer/dpo_trainer.py, DPOTrainer.dpo_loss (lines 1177-1179), loss_type="ipo":
    # logits from summed log-probs (use_ipo length averaging was done upstream in older versions).
    logits = (chosen_logps - rejected_logps) - (ref_chosen_logps - ref_rejected_logps)
    return (logits - 1 / (2 * beta)) ** 2


def trl_head_cpo_ipo(policy_chosen_logps, policy_rejected_logps, beta):
    # TRL HEAD trl/experimental/cpo/cpo_trainer.py, CPOTrainer.cpo_loss (lines 708, 730-732), loss_type="ipo",
    # alpha=0 (no AlphaPO transform): no reference model, length-averaged log-probs.
    logits = policy_chosen_logps - policy_rejected_logps
    return (logits - 1 / (2 * beta)) ** 2


@pytest.mark.parametrize("beta", BETAS)
def test_ipo_matches_trl_head_length_averaged(beta):
    # TRL HEAD f2cd577 trl/trainer/dpo_trainer.py DPOTrainer._compute_loss, loss_type="ipo". aha's ipo_loss is
    # fed the per-token averages, which is what TRL's division by the completion length produces.
    pc, pr, rc, rr = _pairs(4)
    g = _gen(40)
    lengths = torch.randint(1, 30, (2 * N,), generator=g)
    lengths[0] = 0  # an empty completion: TRL clamps its length to 1
    completion_mask = (torch.arange(30)[None, :] < lengths[:, None]).to(torch.float64)
    lc, lr = completion_mask.chunk(2, dim=0)
    lc, lr = lc.sum(1).clamp(min=1.0), lr.sum(1).clamp(min=1.0)
    ours = ipo_loss(pc / lc, pr / lr, rc / lc, rr / lr, beta=beta)
    assert_close(ours, trl_head_dpo_ipo(pc, pr, rc, rr, completion_mask, beta), **TIGHT)


@pytest.mark.parametrize("beta", BETAS)
def test_ipo_matches_trl_v028_summed_and_cpo(beta):
    # TRL v0.28.0 trl/trainer/dpo_trainer.py DPOTrainer.dpo_loss "ipo" (summed log-probs), and TRL HEAD
    # trl/experimental/cpo/cpo_trainer.py CPOTrainer.cpo_loss "ipo" (no reference: ref log-probs 0).
    pc, pr, rc, rr = _pairs(5)
    assert_close(ipo_loss(pc, pr, rc, rr, beta=beta), trl_v028_dpo_ipo(pc, pr, rc, rr, beta), **TIGHT)
    zero = torch.zeros_like(pc)
    avg_c, avg_r = pc / 20, pr / 20
    assert_close(ipo_loss(avg_c, avg_r, zero, zero, beta=beta), trl_head_cpo_ipo(avg_c, avg_r, beta), **TIGHT)


# ---------------------------------------------------------------------------------------------------------
# SimPO
# ---------------------------------------------------------------------------------------------------------

def trl_head_cpo_simpo(policy_chosen_logps, policy_rejected_logps, beta, simpo_gamma, label_smoothing):
    # TRL HEAD trl/experimental/cpo/cpo_trainer.py, CPOTrainer.cpo_loss (lines 708, 714-720), loss_type="simpo",
    # alpha=0 (no AlphaPO transform). With cpo_alpha=0 (pure SimPO) the batch loss is losses.mean() (line 889).
    logits = policy_chosen_logps - policy_rejected_logps
    gamma_logratios = simpo_gamma / beta
    logits = logits - gamma_logratios
    losses = (
        -F.logsigmoid(beta * logits) * (1 - label_smoothing)
        - F.logsigmoid(-beta * logits) * label_smoothing
    )
    return losses


@pytest.mark.parametrize("beta,gamma,label_smoothing",
                         list(itertools.product([0.5, 2.0, 2.5, 10.0], [0.0, 0.3, 0.5, 1.4], [0.0, 0.1, 0.3])))
def test_simpo_matches_trl_cpo_simpo(beta, gamma, label_smoothing):
    # TRL HEAD f2cd577 trl/experimental/cpo/cpo_trainer.py CPOTrainer.cpo_loss, loss_type="simpo": aha's gamma
    # is TRL's simpo_gamma (TRL subtracts simpo_gamma / beta inside beta * (...)).
    g = _gen(6)
    avg_c = -3.0 * torch.rand(N, generator=g, dtype=torch.float64)
    avg_r = -3.0 * torch.rand(N, generator=g, dtype=torch.float64)
    ours = simpo_loss(avg_c, avg_r, beta=beta, gamma=gamma, label_smoothing=label_smoothing)
    assert_close(ours, trl_head_cpo_simpo(avg_c, avg_r, beta, gamma, label_smoothing), **TIGHT)


# ---------------------------------------------------------------------------------------------------------
# ORPO
# ---------------------------------------------------------------------------------------------------------

def trl_head_log1mexp(x):
    # TRL HEAD trl/experimental/orpo/orpo_trainer.py, log1mexp (lines 88-92).
    t = -0.6931471805599453
    return torch.where(x < t, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def trl_head_orpo(policy_chosen_logps, policy_rejected_logps, policy_nll_loss, beta, log1mexp=trl_head_log1mexp):
    # TRL HEAD trl/experimental/orpo/orpo_trainer.py, ORPOTrainer.odds_ratio_loss (lines 694-700) and
    # get_batch_loss_metrics (line 851): loss = policy_nll_loss - (beta * logsigmoid(log_odds)).mean(), with
    # policy_nll_loss one scalar (cross-entropy over the chosen completions' tokens). The .float() casts are
    # left out.
    log_odds = (policy_chosen_logps - policy_rejected_logps) - (
        log1mexp(policy_chosen_logps) - log1mexp(policy_rejected_logps)
    )
    ratio = F.logsigmoid(log_odds)
    losses = beta * ratio
    loss = policy_nll_loss - losses.mean()
    return loss, losses


def trl_pre4763_log1mexp(x):
    # TRL before #4763 (e.g. v0.26.x trl/experimental/orpo/orpo_trainer.py odds_ratio_loss): log1p(-exp(x)).
    return torch.log1p(-torch.exp(x))


def _orpo_inputs(seed, near_zero):
    g = _gen(seed)
    avg_c = -4.0 * torch.rand(N, generator=g, dtype=torch.float64) - 1e-3
    avg_r = -4.0 * torch.rand(N, generator=g, dtype=torch.float64) - 1e-3
    if near_zero:  # probabilities close to 1, where log1p(-exp(x)) cancels and the expm1 branch is needed
        avg_c[: N // 2] = -torch.logspace(-12, -1, N // 2, dtype=torch.float64)
        avg_r[N // 4: 3 * N // 4] = -torch.logspace(-10, -2, N // 2, dtype=torch.float64)
    nll = 2.0 * torch.rand((), generator=g, dtype=torch.float64)
    return avg_c, avg_r, nll


@pytest.mark.parametrize("beta,near_zero", list(itertools.product([0.05, 0.1, 0.25, 1.0], [False, True])))
def test_orpo_matches_trl_head(beta, near_zero):
    # TRL HEAD f2cd577 trl/experimental/orpo/orpo_trainer.py ORPOTrainer.odds_ratio_loss + get_batch_loss_metrics.
    avg_c, avg_r, nll = _orpo_inputs(7, near_zero)
    trl_loss, trl_losses = trl_head_orpo(avg_c, avg_r, nll, beta)
    # per pair, aha's odds-ratio term is minus TRL's `losses`
    assert_close(orpo_loss(avg_c, avg_r, torch.zeros_like(avg_c), beta=beta), -trl_losses, **TIGHT)
    # batch: the same chosen NLL in every pair, then TRL's mean
    ours = orpo_loss(avg_c, avg_r, nll.expand(N), beta=beta)
    assert_close(ours.mean(), trl_loss, **TIGHT)


@pytest.mark.parametrize("beta", [0.1, 1.0])
def test_orpo_matches_trl_log1p_form_away_from_zero(beta):
    # TRL before #4763 (2abee9d, first in v0.27.0) trl/experimental/orpo/orpo_trainer.py odds_ratio_loss used
    # torch.log1p(-torch.exp(x)); with average log-probs well below 0 the two forms agree.
    avg_c, avg_r, nll = _orpo_inputs(8, near_zero=False)
    trl_loss, trl_losses = trl_head_orpo(avg_c, avg_r, nll, beta, log1mexp=trl_pre4763_log1mexp)
    assert_close(orpo_loss(avg_c, avg_r, torch.zeros_like(avg_c), beta=beta), -trl_losses, **TIGHT)
    assert_close(orpo_loss(avg_c, avg_r, nll.expand(N), beta=beta).mean(), trl_loss, **TIGHT)


# ---------------------------------------------------------------------------------------------------------
# KTO
# ---------------------------------------------------------------------------------------------------------

def trl_head_kto(completion_logps, ref_completion_logps, labels, KL_logps, ref_KL_logps, beta,
                 desirable_weight, undesirable_weight):
    # TRL HEAD trl/trainer/kto_trainer.py, KTOTrainer._compute_loss (lines 1518-1592; batch loss at line 1657),
    # loss_type="kto",
    # calculate_KL=True, one process (gather_for_metrics of a scalar is the scalar).
    bool_labels = torch.as_tensor(labels, dtype=torch.bool)
    chosen_idx = torch.nonzero(bool_labels, as_tuple=False).view(-1)
    rejected_idx = torch.nonzero(~bool_labels, as_tuple=False).view(-1)
    chosen_logps = completion_logps.index_select(0, chosen_idx)
    rejected_logps = completion_logps.index_select(0, rejected_idx)
    ref_chosen_logps = ref_completion_logps.index_select(0, chosen_idx)
    ref_rejected_logps = ref_completion_logps.index_select(0, rejected_idx)
    kl = (KL_logps - ref_KL_logps).mean().detach()
    kl = kl.mean().clamp(min=0)
    chosen_logratios = chosen_logps - ref_chosen_logps
    chosen_losses = 1 - F.sigmoid(beta * (chosen_logratios - kl))
    rejected_logratios = rejected_logps - ref_rejected_logps
    rejected_losses = 1 - F.sigmoid(beta * (kl - rejected_logratios))
    losses = torch.cat((desirable_weight * chosen_losses, undesirable_weight * rejected_losses), 0)
    return losses, kl, chosen_idx, rejected_idx


def _kto_inputs(seed, kl_shift):
    g = _gen(seed)
    policy = _summed_logps(g)
    ref = policy + 3.0 * torch.randn(N, generator=g, dtype=torch.float64)
    labels = torch.rand(N, generator=g) < 0.6
    labels[0], labels[1] = True, False
    # mismatched (prompt, completion) pairs: the KL estimate's inputs
    ref_kl = _summed_logps(g)
    kl_policy = ref_kl + kl_shift + 2.0 * torch.randn(N, generator=g, dtype=torch.float64)
    return policy, ref, labels, kl_policy, ref_kl


KTO_CASES = list(itertools.product([0.05, 0.1, 0.5, 2.0], [(1.0, 1.0), (1.33, 1.0), (1.0, 0.75)], [1.5, -1.5]))


@pytest.mark.parametrize("beta,weights,kl_shift", KTO_CASES)
def test_kto_matches_trl_head(beta, weights, kl_shift):
    # TRL HEAD f2cd577 trl/trainer/kto_trainer.py KTOTrainer._compute_loss, loss_type="kto". kl_shift < 0 makes
    # the KL estimate negative, so TRL's clamp(min=0) is exercised.
    dw, uw = weights
    policy, ref, labels, kl_policy, ref_kl = _kto_inputs(9, kl_shift)
    trl_losses, trl_kl, chosen_idx, rejected_idx = trl_head_kto(policy, ref, labels, kl_policy, ref_kl, beta, dw, uw)
    z0 = kto_reference_point(kl_policy, ref_kl)
    assert_close(z0, trl_kl, **TIGHT)
    assert (float(z0) == 0.0) if kl_shift < 0 else (float(z0) > 0.0)
    ours = kto_loss(policy, ref, labels, z0, beta=beta, desirable_weight=dw, undesirable_weight=uw)
    # TRL orders the losses chosen first, then rejected
    assert_close(torch.cat((ours[chosen_idx], ours[rejected_idx])), trl_losses, **TIGHT)
    assert_close(ours.mean(), trl_losses.nanmean(), **TIGHT)


@pytest.mark.parametrize("beta,weights,kl_shift", [(0.1, (1.0, 1.0), 1.5), (0.5, (1.33, 1.0), 1.5),
                                                   (2.0, (1.0, 0.75), -1.5)])
def test_kto_gradients_match_trl(beta, weights, kl_shift):
    # Gradients of TRL's batch loss (losses.nanmean(), kto_trainer.py line 1657) w.r.t. the policy's
    # completion log-probs and its KL (mismatched) log-probs: TRL detaches the KL, so the latter get none.
    dw, uw = weights
    policy0, ref, labels, kl_policy0, ref_kl = _kto_inputs(10, kl_shift)

    def grads(ours):
        policy = policy0.clone().requires_grad_(True)
        kl_policy = kl_policy0.clone().requires_grad_(True)
        if ours:
            z0 = kto_reference_point(kl_policy, ref_kl)
            loss = kto_loss(policy, ref, labels, z0, beta=beta, desirable_weight=dw, undesirable_weight=uw).mean()
        else:
            loss = trl_head_kto(policy, ref, labels, kl_policy, ref_kl, beta, dw, uw)[0].nanmean()
        return torch.autograd.grad(loss, (policy, kl_policy), allow_unused=True)

    (g_ours, kl_g_ours), (g_trl, kl_g_trl) = grads(True), grads(False)
    assert_close(g_ours, g_trl, **TIGHT)
    assert kl_g_ours is None and kl_g_trl is None
    assert (g_ours[labels] < 0).all() and (g_ours[~labels] > 0).all()


# ---------------------------------------------------------------------------------------------------------
# Bradley-Terry reward loss
# ---------------------------------------------------------------------------------------------------------

def trl_head_reward(rewards_chosen, rewards_rejected, margin=None):
    # TRL HEAD trl/trainer/reward_trainer.py, RewardTrainer.compute_loss (lines 749-753),
    # center_rewards_coefficient=None.
    if margin is not None:
        loss = -torch.nn.functional.logsigmoid(rewards_chosen - rewards_rejected - margin).mean()
    else:
        loss = -torch.nn.functional.logsigmoid(rewards_chosen - rewards_rejected).mean()
    return loss


@pytest.mark.parametrize("scale", [0.5, 3.0, 20.0])
def test_bradley_terry_matches_trl_reward_trainer(scale):
    # TRL HEAD f2cd577 trl/trainer/reward_trainer.py RewardTrainer.compute_loss, with and without "margin".
    g = _gen(11)
    rc = scale * torch.randn(N, generator=g, dtype=torch.float64)
    rr = scale * torch.randn(N, generator=g, dtype=torch.float64)
    margin = 2.0 * torch.rand(N, generator=g, dtype=torch.float64)
    assert_close(bradley_terry_loss(rc, rr).mean(), trl_head_reward(rc, rr), **TIGHT)
    assert_close(bradley_terry_loss(rc, rr, margin).mean(), trl_head_reward(rc, rr, margin), **TIGHT)
    for m in (0.0, 0.5, 1.7):  # a scalar margin, as a batch whose margins are all equal would give TRL
        assert_close(bradley_terry_loss(rc, rr, m).mean(), trl_head_reward(rc, rr, torch.full_like(rc, m)), **TIGHT)


# ---------------------------------------------------------------------------------------------------------
# Hinge (SLiC / RSO) and BCO pairs: TRL's DPOTrainer loss_type="hinge" and "bco_pair"
# ---------------------------------------------------------------------------------------------------------

def trl_head_dpo_hinge(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    # TRL HEAD trl/trainer/dpo_trainer.py, DPOTrainer._compute_loss (lines 1437-1438), loss_type="hinge",
    # f_divergence_type="reverse_kl".
    delta_score = (chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)
    return torch.relu(1 - beta * delta_score)


@pytest.mark.parametrize("beta", BETAS + [0.05])
def test_hinge_matches_trl_head(beta):
    # TRL HEAD f2cd577 DPOTrainer._compute_loss "hinge" (and v0.28.0 dpo_loss line 1175, the same expression).
    # The small log-probs make some margins pass 1/beta, where both give exactly 0.
    pc, pr, rc, rr = (x / 8 for x in _pairs(12))
    ours = hinge_loss(pc, pr, rc, rr, beta=beta)
    assert_close(ours, trl_head_dpo_hinge(pc, pr, rc, rr, beta), **TIGHT)
    if beta >= 0.5:
        assert (ours == 0).any() and (ours > 0).any()


class TrlRunningMoments:
    # TRL v0.28.0 trl/trainer/utils.py, RunningMoments (lines 183-221), one process (no accelerator).
    def __init__(self):
        self.mean, self.std, self.var, self.count = 0, 1, 1, 1e-24

    @torch.no_grad()
    def update(self, xs):
        xs_count = xs.numel()
        xs_var, xs_mean = torch.var_mean(xs, unbiased=False)
        xs_mean, xs_var = xs_mean.float(), xs_var.float()
        delta = xs_mean - self.mean
        tot_count = self.count + xs_count
        new_sum = xs_var * xs_count
        old_sum = self.var * self.count + delta**2 * self.count * xs_count / tot_count
        tot_sum = old_sum + new_sum
        self.mean += (delta * xs_count / tot_count).item()
        self.var = (tot_sum / tot_count).item()
        self.count = tot_count


def trl_v028_bco_pair(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta, running):
    # TRL v0.28.0 trl/trainer/dpo_trainer.py, DPOTrainer.dpo_loss (lines 1181-1191), loss_type="bco_pair".
    chosen_logratios = chosen_logps - ref_chosen_logps
    rejected_logratios = rejected_logps - ref_rejected_logps
    chosen_rewards = beta * chosen_logratios
    rejected_rewards = beta * rejected_logratios
    rewards = torch.cat((chosen_rewards, rejected_rewards), 0).mean().detach()
    running.update(rewards)
    delta = running.mean
    return -F.logsigmoid((beta * chosen_logratios) - delta) - F.logsigmoid(-(beta * rejected_logratios - delta))


def trl_head_bco_pair(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    # TRL HEAD trl/trainer/dpo_trainer.py, DPOTrainer._compute_loss (lines 1480-1483), loss_type="bco_pair":
    # since the refactor (#3906) no running reward shift.
    chosen_rewards = beta * (chosen_logps - ref_chosen_logps)
    rejected_rewards = beta * (rejected_logps - ref_rejected_logps)
    return -F.logsigmoid(chosen_rewards) - F.logsigmoid(-rejected_rewards)


@pytest.mark.parametrize("beta", [0.01, 0.1, 0.5])
def test_bco_pair_and_its_running_shift_match_trl_v028_over_micro_batches(beta):
    # TRL v0.28.0 (49ef334): the shift delta is the running mean of each call's mean implicit reward, this
    # call's included; aha's RunningMean keeps the same number per micro-batch. TRL casts the batch mean to
    # fp32 (.float()) before averaging: the deltas agree to fp32 precision, not to float64's.
    from aha.training.supervised.pair_losses import RunningMean

    ours_running, trl_running = RunningMean(), TrlRunningMoments()
    for seed in range(13, 17):  # four micro-batches of different pairs
        pc, pr, rc, rr = _pairs(seed)
        shifted = (pc + 20.0, pr, rc, rr)  # chosen rewards far from rejected ones: the shift matters
        trl = trl_v028_bco_pair(*shifted, beta, trl_running)
        rewards = torch.cat((beta * (shifted[0] - rc), beta * (pr - rr)))
        delta = ours_running.update(float(rewards.mean()))
        assert delta == pytest.approx(trl_running.mean, rel=1e-6, abs=1e-7)
        assert_close(bco_pair_loss(*shifted, beta=beta, delta=delta), trl, rtol=1e-6, atol=1e-7)
    assert ours_running.count == 4
    pc, pr, rc, rr = _pairs(17)
    assert_close(bco_pair_loss(pc, pr, rc, rr, beta=beta), trl_head_bco_pair(pc, pr, rc, rr, beta), **TIGHT)


# ---------------------------------------------------------------------------------------------------------
# ODPO (DPO with an offset): the authors' code, and TRL's reward-model margin on implicit rewards
# ---------------------------------------------------------------------------------------------------------

def odpo_authors_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
                      beta, alpha, chosen_rewards, rejected_rewards):
    # github.com/rycolab/odpo @ 6152f67 (2025-02-17) trainers.py, preference_loss (lines 49-99), offset=True,
    # ratio=False (config/loss/odpo.yaml): the offset is alpha * log(r_w - r_l).
    pi_logratios = policy_chosen_logps - policy_rejected_logps
    ref_logratios = reference_chosen_logps - reference_rejected_logps
    logits = pi_logratios - ref_logratios
    margin = torch.stack(chosen_rewards, dim=0) - torch.stack(rejected_rewards, dim=0)
    margin = torch.log(margin)
    return -F.logsigmoid(beta * logits - alpha * margin)


@pytest.mark.parametrize("beta,alpha", list(itertools.product([0.05, 0.5, 0.7], [0.5, 1.0])))
def test_odpo_matches_the_authors_code_and_trls_reward_margin(beta, alpha):
    pc, pr, rc, rr = _pairs(18)
    g = _gen(19)
    rejected = torch.rand(N, generator=g, dtype=torch.float64)
    chosen = rejected + 3.0 * torch.rand(N, generator=g, dtype=torch.float64) + 1e-3  # gaps both sides of 1
    offset = reward_offset(chosen, rejected, alpha, "log")
    ours = dpo_loss(pc, pr, rc, rr, beta=beta, offset=offset)
    assert_close(ours, odpo_authors_loss(pc, pr, rc, rr, beta, alpha, list(chosen), list(rejected)), **TIGHT)
    # TRL HEAD RewardTrainer's margin loss on the implicit rewards beta * log(pi / ref) is the same per batch
    assert_close(ours.mean(), trl_head_reward(beta * (pc - rc), beta * (pr - rr), offset), **TIGHT)


# ---------------------------------------------------------------------------------------------------------
# TDPO: the authors' code (not in TRL)
# ---------------------------------------------------------------------------------------------------------

def tdpo_authors_get_batch_logps(logits, reference_logits, labels):
    # github.com/Vance0124/Token-level-Direct-Preference-Optimization @ 2a736ec (2025-02-14) trainers.py,
    # _tdpo_get_batch_logps (lines 115-158), average_log_prob=False: logits and labels over the whole sequence,
    # -100 outside completions.
    labels = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    reference_logits = reference_logits[:, :-1, :]
    loss_mask = labels != -100
    labels[labels == -100] = 0
    vocab_logps = logits.log_softmax(-1)
    reference_vocab_ps = reference_logits.softmax(-1)
    reference_vocab_logps = reference_vocab_ps.log()
    per_position_kl = (reference_vocab_ps * (reference_vocab_logps - vocab_logps)).sum(-1)
    per_token_logps = torch.gather(vocab_logps, dim=2, index=labels.unsqueeze(2)).squeeze(2)
    per_reference_token_logps = torch.gather(reference_vocab_logps, dim=2, index=labels.unsqueeze(2)).squeeze(2)
    logps_margin = per_token_logps - per_reference_token_logps
    return ((logps_margin * loss_mask).sum(-1), (per_position_kl * loss_mask).sum(-1),
            (per_token_logps * loss_mask).sum(-1))


def tdpo_authors_loss(chosen_logps_margin, rejected_logps_margin, chosen_position_kl, rejected_position_kl, beta,
                      alpha, if_tdpo2):
    # the same file, tdpo_loss (lines 46-83); the rewards it also returns are left out.
    chosen_rejected_logps_margin = chosen_logps_margin - rejected_logps_margin
    if not if_tdpo2:
        logits = chosen_rejected_logps_margin - (rejected_position_kl - chosen_position_kl)
    else:
        logits = chosen_rejected_logps_margin - alpha * (rejected_position_kl - chosen_position_kl.detach())
    return -F.logsigmoid(beta * logits)


def _tdpo_batch(seed, pairs=6, length=9, vocab=11):
    """Random policy and reference logits over whole sequences (chosen rows first), and labels with a prompt
    of 2 to 3 tokens and a completion of 1 or more, -100 elsewhere (as the authors' data collator)."""
    g = _gen(seed)
    logits = 3.0 * torch.randn(2 * pairs, length, vocab, generator=g, dtype=torch.float64)
    ref_logits = logits + torch.randn(2 * pairs, length, vocab, generator=g, dtype=torch.float64)
    labels = torch.randint(0, vocab, (2 * pairs, length), generator=g)
    for row in range(2 * pairs):
        prompt = 2 + row % 2
        end = int(torch.randint(prompt + 1, length + 1, (1,), generator=g))
        labels[row, :prompt], labels[row, end:] = -100, -100
    return logits, ref_logits, labels


def _aha_tdpo_inputs(logits, ref_logits, labels):
    """aha's side: log-softmax at the positions that predict a completion token, token_kl there, sums per row."""
    targets, shifted = labels[:, 1:], logits[:, :-1]
    keep = targets != -100
    policy_logprobs = torch.log_softmax(shifted[keep], -1)
    ref_logprobs = torch.log_softmax(ref_logits[:, :-1][keep], -1)
    owner = torch.arange(len(labels)).repeat_interleave(keep.sum(1))
    total = lambda rows: rows.new_zeros(len(labels)).index_add(0, owner, rows)
    picked = targets[keep][:, None]
    return (total(policy_logprobs.gather(1, picked).squeeze(1)), total(ref_logprobs.gather(1, picked).squeeze(1)),
            total(token_kl(ref_logprobs, policy_logprobs)))


@pytest.mark.parametrize("version,alpha,beta", [(1, 0.5, 0.1), (2, 0.5, 0.1), (2, 0.2, 0.5), (2, 1.0, 2.0)])
def test_tdpo_matches_the_authors_code_in_value_and_gradient(version, alpha, beta):
    logits0, ref_logits, labels = _tdpo_batch(20 + version)
    k = len(labels) // 2

    def ours(logits):
        logps, ref, kl = _aha_tdpo_inputs(logits, ref_logits, labels)
        return tdpo_loss(logps[:k], logps[k:], ref[:k], ref[k:], kl[:k], kl[k:], beta, alpha, version)

    def authors(logits):
        margin, kl, _ = tdpo_authors_get_batch_logps(logits, ref_logits, labels)
        return tdpo_authors_loss(margin[:k], margin[k:], kl[:k], kl[k:], beta, alpha, version == 2)

    a, b = logits0.clone().requires_grad_(True), logits0.clone().requires_grad_(True)
    assert_close(ours(a), authors(b), **TIGHT)
    ours(a).mean().backward()
    authors(b).mean().backward()
    assert_close(a.grad, b.grad, **TIGHT)  # the stop-gradient on the chosen KL sits where the authors put it
    assert (a.grad[:, :-1].abs().sum(-1) > 0).any()
