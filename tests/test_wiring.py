"""Wiring: each option reaches the maths it names.

Every expected value here is computed in this file, independently of the code under test
(log-probs from the model's own forward pass, the losses and estimators written out again),
on steps where the importance ratio is not 1 and with parameters away from their defaults,
so that a one-line slip in the wiring (a swapped or dropped argument, a wrong model, a
missing file) fails a test. bench/mutants.py plants such slips and checks that they do."""

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from aha.config import (
    AlgorithmConfig,
    Config,
    ConfigError,
    RewardSpec,
    RolloutConfig,
    TrainConfig,
    apply_override,
    load_config,
)
from aha.models import load
from aha.models.value import ValueModel
from aha.rollout import Rollouts
from aha.training.rl.batch import Batch
from aha.training.rl.update import Learner, Shape, policy_update

G = 4  # group size
T = 6  # completion width
PROMPT_LENGTHS = (3, 5)  # one prompt per group, left-padded
COMPLETION_LENGTHS = (6, 4, 5, 2, 3, 6, 1, 5)  # right-padded; 6 = cut at max_new_tokens
N = len(COMPLETION_LENGTHS)
QUIET = lambda *_: None


# ---------------------------------------------------------------- helpers written for these tests


@pytest.fixture(scope="module")
def tiny():
    return load("tiny", seed=0)


def make_rollouts(vocab: int, seed: int = 0) -> Rollouts:
    """Two groups of four completions of known lengths over random tokens (ids >= 3: no specials)."""
    g = torch.Generator().manual_seed(seed)
    P = max(PROMPT_LENGTHS)
    prompt_ids = torch.zeros(N, P, dtype=torch.long)
    prompt_mask = torch.zeros(N, P, dtype=torch.long)
    for group, length in enumerate(PROMPT_LENGTHS):
        rows = slice(group * G, group * G + G)
        prompt_ids[rows, P - length:] = torch.randint(3, vocab, (length,), generator=g)
        prompt_mask[rows, P - length:] = 1
    completion_ids = torch.zeros(N, T, dtype=torch.long)
    completion_mask = torch.zeros(N, T)
    for i, length in enumerate(COMPLETION_LENGTHS):
        completion_ids[i, :length] = torch.randint(3, vocab, (length,), generator=g)
        completion_mask[i, :length] = 1.0
    truncated = torch.tensor([length == T for length in COMPLETION_LENGTHS])
    return Rollouts(prompt_ids, prompt_mask, completion_ids, completion_mask, torch.zeros(N, T),
                    torch.arange(N) // G, ["x"] * N, truncated)


def mask_rollouts(mask: torch.Tensor) -> Rollouts:
    """Rollouts that carry only a completion mask (for the advantage estimators)."""
    rows, width = mask.shape
    return Rollouts(torch.zeros(rows, 1, dtype=torch.long), torch.ones(rows, 1, dtype=torch.long),
                    torch.full((rows, width), 5, dtype=torch.long), mask, torch.zeros(rows, width),
                    torch.arange(rows), ["x"] * rows, torch.zeros(rows, dtype=torch.bool))


def logprobs_of(model, ro: Rollouts, with_entropy: bool = False):
    """log pi(completion_t | prompt, completion_<t) from one plain forward pass of the whole sequence
    (and the entropy of pi at each completion position)."""
    ids = torch.cat([ro.prompt_ids, ro.completion_ids], dim=1)
    attention = torch.cat([ro.prompt_mask, ro.completion_mask.long()], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=False).logits.float()
    P = ro.prompt_ids.shape[1]
    log_pi = F.log_softmax(logits[:, P - 1:-1], dim=-1)
    logp = log_pi.gather(2, ro.completion_ids.unsqueeze(2)).squeeze(2) * ro.completion_mask
    if with_entropy:
        return logp, -(log_pi.exp() * log_pi).sum(dim=-1) * ro.completion_mask
    return logp


def perturbed(model, scale=0.02, seed=1):
    other = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return other


def noise(seed, low, high, shape=(N, T)):
    g = torch.Generator().manual_seed(seed)
    return low + (high - low) * torch.rand(shape, generator=g)


def grads_of(model) -> list[torch.Tensor]:
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def agg(values, mask, mode, constant):
    """The four loss aggregations, written out."""
    if mode == "token_mean":
        return (values * mask).sum() / mask.sum()
    if mode == "seq_mean_token_sum":
        return (values * mask).sum(dim=1).mean()
    if mode == "seq_mean_token_mean":
        return ((values * mask).sum(dim=1) / mask.sum(dim=1)).mean()
    assert mode == "constant"
    return (values * mask).sum() / (mask.shape[0] * constant)


def ppo_terms(logp, old, adv, low, high, dual=None):
    """(per-token loss, clipped) of PPO with clip range [1 - low, 1 + high] and dual clip."""
    ratio = torch.exp(logp - old)
    unclipped, clipped_obj = ratio * adv, torch.clamp(ratio, 1 - low, 1 + high) * adv
    objective = torch.minimum(unclipped, clipped_obj)
    clipped = clipped_obj < unclipped
    if dual is not None:
        capped = (adv < 0) & (objective < dual * adv)
        objective = torch.where(capped, dual * adv, objective)
        clipped = clipped | capped
    return -objective, clipped


def gspo_terms(logp, old, adv, mask, low, high):
    """GSPO-token: s_i,t = sg[s_i] * pi_t / sg[pi_t], s_i = exp(mean_t(logp - old)), clipped per token as PPO."""
    s = torch.exp(((logp - old) * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True))
    ratio = s.detach() * torch.exp(logp - logp.detach())
    return -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - low, 1 + high) * adv)


def cispo_terms(logp, old, adv, low, high):
    weight = torch.clamp(torch.exp(logp - old).detach(), 1 - low, 1 + high)
    return -weight * adv * logp


# ---------------------------------------------------------------- the policy update


UPDATE_CASES = {
    # clip_low != clip_high, so swapping them changes which tokens are clipped
    "ppo_asymmetric_clip": dict(policy_loss="ppo", clip_low=0.1, clip_high=0.35),
    "ppo_dual_clip": dict(policy_loss="ppo", clip_low=0.2, clip_high=0.2, dual_clip=1.3),
    "gspo_token_advantages": dict(policy_loss="gspo", clip_low=0.04, clip_high=0.12, loss_agg="seq_mean_token_mean"),
    "cispo": dict(policy_loss="cispo", clip_low=0.15, clip_high=0.1, loss_agg="constant", loss_agg_constant=9),
    "ppo_is_weights_seq_sum": dict(policy_loss="ppo", clip_low=0.25, clip_high=0.15, loss_agg="seq_mean_token_sum"),
    "ppo_kl_k2_entropy": dict(policy_loss="ppo", clip_low=0.3, clip_high=0.1, kl_coef=0.7, kl_estimator="k2",
                              entropy_coef=0.05),
    "ppo_mask_truncated": dict(policy_loss="ppo", clip_low=0.1, clip_high=0.2, mask_truncated=True),
}


def independent_loss(algo, logp, old, adv, mask, constant, is_weights=None, ref=None, entropy=None):
    if algo.policy_loss == "ppo":
        loss_tok, _ = ppo_terms(logp, old, adv, algo.clip_low, algo.clip_high, algo.dual_clip)
    elif algo.policy_loss == "gspo":
        loss_tok = gspo_terms(logp, old, adv, mask, algo.clip_low, algo.clip_high)
    else:
        loss_tok = cispo_terms(logp, old, adv, algo.clip_low, algo.clip_high)
    if is_weights is not None:
        loss_tok = loss_tok * is_weights
    loss = agg(loss_tok, mask, algo.loss_agg, constant)
    if ref is not None:
        log_r = ref - logp
        kl = {"k1": -log_r, "k2": 0.5 * log_r**2, "k3": torch.exp(log_r) - log_r - 1}[algo.kl_estimator]
        loss = loss + algo.kl_coef * agg(kl, mask, algo.loss_agg, constant)
    if algo.entropy_coef:
        loss = loss - algo.entropy_coef * agg(entropy, mask, algo.loss_agg, constant)
    return loss


@pytest.mark.parametrize("case", list(UPDATE_CASES))
def test_update_loss_and_gradient_match_the_loss_written_out(tiny, case):
    """One optimizer step off-policy (old log-probs perturbed, ratios in ~[0.5, 2]) with per-token
    advantages: the logged loss, clip fraction and every parameter gradient equal the configured
    loss computed here from a plain forward pass."""
    algo = AlgorithmConfig(**UPDATE_CASES[case])
    ro = make_rollouts(len(tiny.tokenizer))
    mask = ro.completion_mask
    if algo.mask_truncated:
        mask = mask * (~ro.truncated).float().unsqueeze(1)
    model = copy.deepcopy(tiny.model)
    with torch.no_grad():
        current = logprobs_of(model, ro)
    # a per-sequence shift and a per-token jitter: sequence ratios (gspo) and token ratios (ppo) both spread
    old = (current - noise(1, -0.2, 0.2, (N, 1)) - noise(2, -0.55, 0.55)) * ro.completion_mask
    adv = torch.randn(N, T, generator=torch.Generator().manual_seed(3)) * ro.completion_mask
    batch = Batch(ro, torch.zeros(N), old_logprobs=old, advantages=adv)
    if case == "ppo_is_weights_seq_sum":
        batch.is_weights = noise(4, 0.3, 1.7) * ro.completion_mask
    ref_model = perturbed(model) if algo.kl_coef else None
    if ref_model is not None:
        with torch.no_grad():
            batch.ref_logprobs = logprobs_of(ref_model, ro)
    constant = 7
    expected_model = copy.deepcopy(model)
    logp, entropy = logprobs_of(expected_model, ro, with_entropy=True)
    expected = independent_loss(algo, logp, old, adv, mask, algo.loss_agg_constant or constant, batch.is_weights,
                                batch.ref_logprobs, entropy)
    expected.backward()

    shape = Shape(G, 4 if case.startswith("ppo") else 8, case != "cispo", 1.0, torch.float32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: read the gradient, keep the weights
    metrics = policy_update(Learner(model, optimizer, ref_model), batch, algo, shape, max_grad_norm=1e9,
                            loss_constant=algo.loss_agg_constant or constant)
    assert metrics["loss/total"] == pytest.approx(float(expected.detach()), abs=1e-6, rel=1e-5)
    for got, want in zip(grads_of(model), grads_of(expected_model)):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)
    if algo.policy_loss == "ppo":
        _, clipped = ppo_terms(logp.detach(), old, adv, algo.clip_low, algo.clip_high, algo.dual_clip)
        frac = float((clipped.float() * mask).sum() / mask.sum())
        assert 0 < frac < 1  # the clip matters in this batch
        assert metrics["policy/clip_frac"] == pytest.approx(frac, abs=1e-6)
        assert metrics["policy/ratio_mean"] == pytest.approx(
            float((torch.exp(logp.detach() - old) * mask).sum() / mask.sum()), abs=1e-5)


def test_two_epochs_of_clipped_sgd_equal_two_steps_written_out(tiny):
    """epochs=2: the second step's ratio is against the same old log-probs (not 1), and each
    step's gradient is rescaled to max_grad_norm before SGD."""
    algo = AlgorithmConfig(policy_loss="ppo", clip_low=0.1, clip_high=0.3, epochs=2)
    ro = make_rollouts(len(tiny.tokenizer), seed=5)
    mask = ro.completion_mask
    model = copy.deepcopy(tiny.model)
    with torch.no_grad():
        old = (logprobs_of(model, ro) - noise(6, -0.3, 0.3)) * mask
    adv = torch.randn(N, T, generator=torch.Generator().manual_seed(7)) * mask
    batch = Batch(ro, torch.zeros(N), old_logprobs=old, advantages=adv)
    lr, max_norm = 0.5, 0.05

    expected_model = copy.deepcopy(model)
    params = list(expected_model.parameters())
    losses, norms = [], []
    for _ in range(2):
        expected_model.zero_grad()
        loss = independent_loss(algo, logprobs_of(expected_model, ro), old, adv, mask, T)
        loss.backward()
        norm = float(torch.sqrt(sum((p.grad**2).sum() for p in params)))
        scale = min(1.0, max_norm / (norm + 1e-6))
        with torch.no_grad():
            for p in params:
                p.sub_(lr * scale * p.grad)
        losses.append(float(loss.detach()))
        norms.append(norm)
    assert min(norms) > 2 * max_norm  # the clip binds at both steps

    metrics = policy_update(Learner(model, torch.optim.SGD(model.parameters(), lr=lr)), batch, algo,
                            Shape(G, 8, True, 1.0, torch.float32), max_grad_norm=max_norm, loss_constant=T)
    assert metrics["optimizer_steps"] == 2
    assert abs(losses[1] - losses[0]) > 1e-4  # the second epoch saw moved weights
    assert metrics["loss/total"] == pytest.approx(sum(losses) / 2, abs=1e-6)
    assert metrics["loss/total_first_step"] == pytest.approx(losses[0], abs=1e-6)
    assert metrics["grad_norm"] == pytest.approx(sum(norms) / 2, rel=1e-4)
    for got, want in zip(model.parameters(), expected_model.parameters()):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


def test_critic_step_uses_the_clipped_value_loss(tiny):
    """gae: the value loss is 0.5 max((V - R)^2, (V_old + clip(V - V_old, +-c) - R)^2), token mean.
    The head starts at zero (V = 0), so the head's bias moves by -lr * mean_t dloss/dV_t."""
    algo = AlgorithmConfig(advantage="gae", value_clip=0.15)
    ro = make_rollouts(len(tiny.tokenizer), seed=8)
    mask = ro.completion_mask
    model = copy.deepcopy(tiny.model)
    critic = ValueModel(model)
    old_values = noise(9, -0.6, 0.6) * mask
    returns = noise(10, -1.0, 1.0) * mask
    batch = Batch(ro, torch.zeros(N), old_logprobs=torch.zeros(N, T), advantages=torch.zeros(N, T),
                  old_values=old_values, returns=returns)
    lr = 0.3
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.0), None, critic,
                      torch.optim.SGD(critic.parameters(), lr=lr))
    metrics = policy_update(learner, batch, algo, Shape(G, 8, True, 1.0, torch.float32), 1e9, T)

    v = torch.zeros(N, T, requires_grad=True)  # the zero head's values
    clipped_v = old_values + torch.clamp(v - old_values, -0.15, 0.15)
    v_tok = 0.5 * torch.maximum((v - returns) ** 2, (clipped_v - returns) ** 2)
    loss = (v_tok * mask).sum() / mask.sum()
    loss.backward()
    assert metrics["loss/value"] == pytest.approx(float(loss.detach()), abs=1e-6)
    frac = float((((clipped_v - returns) ** 2 > (v - returns) ** 2).float() * mask).sum() / mask.sum())
    assert 0 < frac < 1 and metrics["value/clip_frac"] == pytest.approx(frac, abs=1e-6)
    assert float(critic.head.bias) == pytest.approx(-lr * float(v.grad.sum()), abs=1e-6)


# ---------------------------------------------------------------- preparing the batch


def parts_for(config, learner):
    from aha.training.rl.parts import StepParts

    shape = Shape(config.rollout.group_size, 8, True, 1.0, torch.float32)
    return StepParts(config, None, None, None, None, learner, shape, None)


def test_trainer_old_logprobs_come_from_the_policy_and_tis_weights_are_capped(tiny):
    """old_logprobs=trainer: the ratio's denominator is the policy's own forward pass (not the
    reference's, not the engine's); tis_cap weights each token by min(pi_trainer / pi_engine, cap);
    the reference's log-probs come from the reference. The update then applies the weights."""
    from aha.training.rl.step import prepare

    ro = make_rollouts(len(tiny.tokenizer), seed=11)
    mask = ro.completion_mask
    policy, ref = copy.deepcopy(tiny.model), perturbed(tiny.model, 0.05)
    with torch.no_grad():
        trainer, ref_lp = logprobs_of(policy, ro), logprobs_of(ref, ro)
    engine = (trainer + noise(12, -0.4, 0.4)) * mask
    ro.sampling_logprobs = engine
    config = Config(model="tiny", rollout=RolloutConfig(group_size=G),
                    algorithm=AlgorithmConfig(old_logprobs="trainer", tis_cap=1.15, kl_coef=0.25))
    learner = Learner(policy, torch.optim.SGD(policy.parameters(), lr=0.0), ref)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 0.0, 1.0, 1.0, 0.0])
    batch, stats = prepare(parts_for(config, learner), Batch(ro, rewards))

    valid = mask.bool()
    torch.testing.assert_close(batch.old_logprobs[valid], trainer[valid], atol=1e-5, rtol=0)
    torch.testing.assert_close(batch.ref_logprobs[valid], ref_lp[valid], atol=1e-5, rtol=0)
    weights = torch.clamp(torch.exp(trainer - engine), max=1.15)
    assert (weights[valid] == 1.15).any() and (weights[valid] < 0.9).any()
    torch.testing.assert_close(batch.is_weights[valid], weights[valid], atol=1e-5, rtol=1e-5)
    assert stats["logprobs/engine_trainer_abs_diff"] == pytest.approx(
        float(((trainer - engine).abs() * mask).sum() / mask.sum()), abs=1e-5)

    # the update: PPO (ratio 1 on this first step) times the weights, plus kl_coef * k3 to the reference
    model = policy
    expected_model = copy.deepcopy(model)
    logp = logprobs_of(expected_model, ro)
    expected = independent_loss(config.algorithm, logp, batch.old_logprobs, batch.advantages, mask, T, weights,
                                ref_lp)
    expected.backward()
    metrics = policy_update(learner, batch, config.algorithm, parts_for(config, learner).shape, 1e9, T)
    assert metrics["loss/total"] == pytest.approx(float(expected.detach()), abs=1e-6)
    for got, want in zip(grads_of(model), grads_of(expected_model)):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-4)


def test_engine_old_logprobs_are_the_sampling_logprobs_and_no_weights_without_a_cap(tiny):
    from aha.training.rl.step import prepare

    ro = make_rollouts(len(tiny.tokenizer), seed=13)
    ro.sampling_logprobs = noise(14, -3.0, -1.0) * ro.completion_mask
    config = Config(model="tiny", rollout=RolloutConfig(group_size=G), algorithm=AlgorithmConfig())
    policy = copy.deepcopy(tiny.model)
    batch, _ = prepare(parts_for(config, Learner(policy, torch.optim.SGD(policy.parameters(), lr=0.0))),
                       Batch(ro, torch.arange(N, dtype=torch.float32)))
    assert torch.equal(batch.old_logprobs, ro.sampling_logprobs) and batch.is_weights is None
    config = Config(model="tiny", rollout=RolloutConfig(group_size=G),
                    algorithm=AlgorithmConfig(old_logprobs="trainer"))
    batch, _ = prepare(parts_for(config, Learner(policy, torch.optim.SGD(policy.parameters(), lr=0.0))),
                       Batch(ro, torch.arange(N, dtype=torch.float32)))
    assert batch.is_weights is None
    with torch.no_grad():
        torch.testing.assert_close(batch.old_logprobs, logprobs_of(policy, ro), atol=1e-5, rtol=0)


# ---------------------------------------------------------------- ProRL reference resets


def _stepped_adam(model):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sum((p**2).sum() for p in model.parameters()).backward()
    optimizer.step()
    optimizer.zero_grad()
    return optimizer


@pytest.mark.parametrize("reset_optimizer", [True, False])
def test_prorl_reset_copies_the_policy_into_the_reference_and_resets_the_optimizer(tiny, reset_optimizer):
    from aha.training.rl.step import maybe_reset_reference

    policy = copy.deepcopy(tiny.model)
    ref = perturbed(policy, 0.05)
    optimizer = _stepped_adam(policy)
    before = {id(p): {k: v.clone() for k, v in s.items()} for p, s in optimizer.state.items()}
    assert len(before) > 0
    config = Config(model="tiny", algorithm=AlgorithmConfig(kl_coef=0.1, ref_reset_every=3,
                                                            ref_reset_optimizer=reset_optimizer))
    parts = parts_for(config, Learner(policy, optimizer, ref))
    ref_before = copy.deepcopy(ref.state_dict())

    assert maybe_reset_reference(parts, 2, kl_to_ref=50.0) is False  # not due, no KL threshold
    assert all(torch.equal(v, ref.state_dict()[k]) for k, v in ref_before.items())
    assert len(optimizer.state) == len(before)

    policy_before = copy.deepcopy(policy.state_dict())
    assert maybe_reset_reference(parts, 3, kl_to_ref=None) is True
    for (k, v), (k2, w) in zip(ref.state_dict().items(), policy.state_dict().items()):
        assert k == k2 and torch.equal(v, w)
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in policy_before.items())  # the policy is kept
    assert [g["lr"] for g in optimizer.param_groups] == [1e-2]  # only the state is reset
    if reset_optimizer:
        assert len(optimizer.state) == 0  # Adam's moments and step count start afresh
    else:
        assert {id(p): {k: v for k, v in s.items()} for p, s in optimizer.state.items()}.keys() == before.keys()
        for p, s in optimizer.state.items():
            for k, v in s.items():
                assert torch.equal(v, before[id(p)][k])
    with torch.no_grad():  # the reference is a copy: moving the policy leaves it
        next(policy.parameters()).add_(1.0)
    assert not torch.equal(next(policy.parameters()), next(ref.parameters()))


def test_prorl_reset_on_the_kl_threshold(tiny):
    from aha.training.rl.step import maybe_reset_reference

    policy = copy.deepcopy(tiny.model)
    ref = perturbed(policy, 0.05)
    optimizer = _stepped_adam(policy)
    config = Config(model="tiny", algorithm=AlgorithmConfig(kl_coef=0.1, ref_reset_kl=0.05))
    parts = parts_for(config, Learner(policy, optimizer, ref))
    assert maybe_reset_reference(parts, 4, kl_to_ref=0.04) is False
    assert maybe_reset_reference(parts, 4, kl_to_ref=None) is False
    assert len(optimizer.state) > 0 and not torch.equal(next(ref.parameters()), next(policy.parameters()))
    assert maybe_reset_reference(parts, 5, kl_to_ref=0.06) is True
    assert torch.equal(next(ref.parameters()), next(policy.parameters())) and len(optimizer.state) == 0


# ---------------------------------------------------------------- learner, optimizers, checkpoints


def test_build_learner_gives_each_optimizer_its_own_settings(tiny):
    from aha.training.rl.method import _apply_hyperparameters, build_learner

    config = Config(model="tiny", train=TrainConfig(lr=2e-3, betas=(0.8, 0.95), weight_decay=0.03),
                    algorithm=AlgorithmConfig(advantage="gae", critic_lr=7e-4))
    learner = build_learner(copy.deepcopy(tiny.model), config)
    assert learner.ref_model is None  # kl_coef 0: no reference at all
    assert [(g["lr"], g["betas"],
             g["weight_decay"]) for g in learner.optimizer.param_groups] == [(2e-3, (0.8, 0.95), 0.03)]
    assert [(g["lr"], g["betas"], g["weight_decay"]) for g in learner.critic_optimizer.param_groups] == [
        (7e-4, (0.8, 0.95), 0.03)]
    critic_params = {id(p) for g in learner.critic_optimizer.param_groups for p in g["params"]}
    assert critic_params == {id(p) for p in learner.critic.parameters()}
    optimized = {id(p) for g in learner.optimizer.param_groups for p in g["params"]}
    assert optimized == {id(p) for p in learner.model.parameters()}
    # a resume with changed hyperparameters sets them again, each on its own optimizer
    changed = Config(model="tiny", train=TrainConfig(lr=5e-3, betas=(0.7, 0.9), weight_decay=0.0),
                     algorithm=AlgorithmConfig(advantage="gae", critic_lr=4e-5))
    _apply_hyperparameters(learner, changed)
    assert [(g["lr"], g["betas"],
             g["weight_decay"]) for g in learner.optimizer.param_groups] == [(5e-3, (0.7, 0.9), 0.0)]
    assert [(g["lr"], g["betas"], g["weight_decay"]) for g in learner.critic_optimizer.param_groups] == [
        (4e-5, (0.7, 0.9), 0.0)]
    with_ref = build_learner(copy.deepcopy(tiny.model), Config(model="tiny", algorithm=AlgorithmConfig(kl_coef=0.1)))
    assert with_ref.ref_model is not None and with_ref.critic is None
    assert all(torch.equal(a, b) for a, b in zip(with_ref.ref_model.parameters(), with_ref.model.parameters()))
    assert not any(p.requires_grad for p in with_ref.ref_model.parameters())


@pytest.mark.parametrize("reset", ["algorithm.ref_reset_every=2", "algorithm.ref_reset_kl=0.5"])
def test_checkpoint_holds_and_restores_the_reference_weights(tiny, tmp_path, reset):
    from aha.training.checkpoint import load_checkpoint, save_checkpoint
    from aha.training.rl.method import build_learner, checkpointed

    config = load_config(None, ["model=tiny", "algorithm.kl_coef=0.1", "algorithm.advantage=gae", reset])
    learner = build_learner(copy.deepcopy(tiny.model), config)
    learner.ref_model.load_state_dict(perturbed(tiny.model, 0.05, seed=21).state_dict())
    learner.model.load_state_dict(perturbed(tiny.model, 0.05, seed=22).state_dict())
    with torch.no_grad():
        learner.critic.head.bias.fill_(0.37)
    for module, optimizer in ((learner.model, learner.optimizer), (learner.critic, learner.critic_optimizer)):
        sum((p**2).sum() for p in module.parameters()).backward()  # one step: the optimizers hold moments
        optimizer.step()
        optimizer.zero_grad()
    modules, optimizers = checkpointed(learner, config)
    assert set(modules) == {"model", "critic", "reference"} and set(optimizers) == {"policy", "critic"}
    folder = save_checkpoint(tmp_path / "ckpt", 3, modules, optimizers, {"sampler": {}}, keep=2,
                             tokenizer=tiny.tokenizer)
    saved = load_file(folder / "reference.safetensors")
    ref_state = learner.ref_model.state_dict()
    assert saved.keys() <= ref_state.keys() and len(saved) >= len(ref_state) - 1  # tied embeddings: one copy
    for key, value in saved.items():
        assert torch.equal(value, ref_state[key]), key
    assert not torch.equal(saved["lm_head.weight"], load_file(folder / "model.safetensors")["lm_head.weight"])

    fresh = build_learner(copy.deepcopy(tiny.model), config)
    fresh_modules, fresh_optimizers = checkpointed(fresh, config)
    state, _ = load_checkpoint(folder, fresh_modules, fresh_optimizers)
    assert state["step"] == 3
    for name in ("model", "ref_model", "critic"):
        for a, b in zip(getattr(fresh, name).parameters(), getattr(learner, name).parameters()):
            assert torch.equal(a, b), name
    for name in ("optimizer", "critic_optimizer"):
        restored, saved_opt = getattr(fresh, name).state_dict()["state"], getattr(learner, name).state_dict()["state"]
        assert restored.keys() == saved_opt.keys() and len(restored) > 0
        for key in restored:
            assert all(torch.equal(torch.as_tensor(restored[key][k]), torch.as_tensor(v)) for k,
                       v in saved_opt[key].items())
    # without resets the reference is the initial model: it is not saved
    plain = load_config(None, ["model=tiny", "algorithm.kl_coef=0.1"])
    assert set(checkpointed(build_learner(copy.deepcopy(tiny.model), plain), plain)[0]) == {"model"}


def test_save_checkpoint_keeps_the_newest_ones(tiny, tmp_path):
    from aha.models.checkpoints import list_checkpoints
    from aha.training.checkpoint import save_checkpoint

    model = copy.deepcopy(tiny.model)
    for step in (2, 4, 6, 8, 10):
        save_checkpoint(tmp_path, step, {"model": model}, {}, {}, keep=3)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-6", "step-8", "step-10"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-10", "step-6", "step-8"]  # no temporary left


RESET_RUN = """
model: tiny
output_dir: {out}
task: {{name: arithmetic, a_max: 20, num_eval: 4}}
rollout: {{prompts_per_step: 2, group_size: 4, max_new_tokens: 5}}
train: {{steps: 3, lr: 1.0e-2, checkpoint_every: 1, keep_checkpoints: 5, report: false, dtype: float32}}
algorithm: {{dynamic_sampling: false, kl_coef: 0.5, ref_reset_every: 2}}
reward: [{{fn: numeric_answer}}, {{fn: format, weight: 0.5}}]
eval: {{before: false, after: false}}
"""


def test_resume_after_a_reference_reset_restores_that_reference(tmp_path):
    """The reset at step 2 makes the reference the policy of step 2; a run resumed from step 2 must
    train step 3 against that reference, exactly like a run that never stopped."""
    from aha.training.loop import train

    def run(name, steps):
        path = tmp_path / f"{name}.yaml"
        path.write_text(RESET_RUN.format(out=tmp_path / name))
        return train(load_config(path, [f"train.steps={steps}"]), echo=QUIET)

    run("straight", 3)
    run("resumed", 2)
    step2 = tmp_path / "resumed/checkpoints/step-2"
    ref, model = load_file(step2 / "reference.safetensors"), load_file(step2 / "model.safetensors")
    assert ref.keys() == model.keys() and all(torch.equal(ref[k], model[k]) for k in ref)
    initial = load("tiny", seed=0).model.state_dict()
    ref1 = load_file(tmp_path / "resumed/checkpoints/step-1/reference.safetensors")  # no reset yet
    assert all(torch.equal(ref1[k], initial[k]) for k in ref1)
    run("resumed", 3)
    a = load_file(tmp_path / "straight/checkpoints/step-3/model.safetensors")
    b = load_file(tmp_path / "resumed/checkpoints/step-3/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- advantages in the trainer


def lengths_mask(lengths, width):
    return (torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).float()


def whiten(values, mask):
    """(x - mean) / sqrt(unbiased var + 1e-8) over the valid tokens, in float64."""
    flat = [v for row, m in zip(values, mask) for v, k in zip(row, m) if k]
    mean = sum(flat) / len(flat)
    var = sum((v - mean) ** 2 for v in flat) / (len(flat) - 1)
    return [[(v - mean) / math.sqrt(var + 1e-8) if k else 0.0 for v, k in zip(row, m)] for row, m in zip(values, mask)]


@pytest.mark.parametrize("group_baseline", [True, False])
def test_reinforce_pp_advantages_discount_by_gamma(group_baseline):
    from aha.training.rl.estimate import estimate_advantages

    lengths, rewards, gamma = [4, 2, 5, 3, 1, 5, 2, 4], [1.0, 0.0, 0.5, 2.0, 0.0, 1.0, -1.0, 0.25], 0.7
    mask = lengths_mask(lengths, 5)
    batch = Batch(mask_rollouts(mask), torch.tensor(rewards))
    estimate_advantages(batch, AlgorithmConfig(advantage="reinforce_pp", gamma=gamma, group_baseline=group_baseline), G)
    # the reward sits on the last token: the return at t is gamma^(L-1-t) r
    returns = [[gamma ** (L - 1 - t) * r if t < L else 0.0 for t in range(5)] for L, r in zip(lengths, rewards)]
    if group_baseline:
        for g in range(0, len(lengths), G):
            base = sum(returns[i][0] for i in range(g, g + G)) / G
            for i in range(g, g + G):
                returns[i] = [x - base if t < lengths[i] else 0.0 for t, x in enumerate(returns[i])]
    expected = torch.tensor(whiten(returns, mask.tolist()), dtype=torch.float32)
    torch.testing.assert_close(batch.advantages, expected, atol=1e-5, rtol=1e-5)


def test_gae_advantages_use_gamma_and_lambda_and_whiten():
    from aha.training.rl.estimate import estimate_advantages

    lengths, rewards, gamma, lam = [3, 1, 4, 2], [1.0, -0.5, 0.25, 2.0], 0.8, 0.6
    mask = lengths_mask(lengths, 4)
    values = noise(30, -1.0, 1.0, (4, 4)) * mask
    for whitened in (False, True):
        batch = Batch(mask_rollouts(mask), torch.tensor(rewards), old_values=values.clone())
        estimate_advantages(batch, AlgorithmConfig(advantage="gae", gamma=gamma, lam=lam, whiten_advantages=whitened),
                            2)
        adv = [[0.0] * 4 for _ in lengths]
        for i, (L, r) in enumerate(zip(lengths, rewards)):
            running = 0.0
            for t in reversed(range(L)):
                next_value = float(values[i, t + 1]) if t + 1 < L else 0.0
                delta = (r if t == L - 1 else 0.0) + gamma * next_value - float(values[i, t])
                running = delta + gamma * lam * running
                adv[i][t] = running
        returns = torch.tensor(adv) + values
        torch.testing.assert_close(batch.returns, returns * mask, atol=1e-5, rtol=1e-5)
        expected = whiten(adv, mask.tolist()) if whitened else adv
        torch.testing.assert_close(batch.advantages, torch.tensor(expected), atol=1e-5, rtol=1e-5)


def test_sequence_advantages_with_kl_in_the_reward():
    """kl_in=reward: each token pays kl_coef * KL(sampling || reference) (k1 = logp - ref), so a
    sequence's reward is r - kl_coef * sum_t kl_t; Dr. GRPO (scale none) centres it, RLOO leaves one out."""
    from aha.training.rl.estimate import estimate_advantages

    lengths, rewards = [3, 1, 4, 2, 2, 4, 1, 3], [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.0, 1.0]
    mask = lengths_mask(lengths, 4)
    ro = mask_rollouts(mask)
    ro.sampling_logprobs = noise(31, -2.0, -0.5, (8, 4)) * mask
    ref = noise(32, -2.0, -0.5, (8, 4)) * mask
    coef = 0.3
    seq = [r - coef * float(((ro.sampling_logprobs[i] - ref[i]) * mask[i]).sum()) for i, r in enumerate(rewards)]
    for advantage, scale in (("grpo", "none"), ("grpo", "std"), ("rloo", "std")):
        algo = AlgorithmConfig(advantage=advantage, advantage_scale=scale, kl_coef=coef, kl_in="reward",
                               kl_estimator="k1")
        batch = Batch(ro, torch.tensor(rewards), ref_logprobs=ref)
        stats = estimate_advantages(batch, algo, G)
        expected = []
        for g in range(0, 8, G):
            group = seq[g:g + G]
            mean = sum(group) / G
            std = math.sqrt(sum((x - mean) ** 2 for x in group) / (G - 1))
            for x in group:
                if advantage == "rloo":
                    expected.append(x - (sum(group) - x) / (G - 1))
                else:
                    expected.append((x - mean) / (std + 1e-6) if scale == "std" else x - mean)
        torch.testing.assert_close(batch.advantages, torch.tensor(expected).unsqueeze(1) * mask, atol=1e-5, rtol=1e-5)
        kl_mean = float(((ro.sampling_logprobs - ref) * mask).sum() / mask.sum())
        assert stats["kl/ref"] == pytest.approx(kl_mean, abs=1e-6)


def test_ktae_token_weights_use_the_configured_alpha():
    """token_weighting=ktae: a token v of a rollout with advantage A gets weight 1 + alpha sign(A) d(v),
    d(v) = share of the group's positive rollouts holding v - share of its negative ones."""
    from aha.training.rl.estimate import estimate_advantages

    ids = torch.tensor([[5, 6, 7, 0], [5, 8, 0, 0], [9, 6, 6, 5], [8, 8, 9, 0]])
    lengths, rewards, alpha = [3, 2, 4, 3], [1.0, 0.0, 1.0, 0.5], 0.3
    mask = lengths_mask(lengths, 4)
    ro = mask_rollouts(mask)
    ro.completion_ids = ids
    batch = Batch(ro, torch.tensor(rewards))
    estimate_advantages(batch, AlgorithmConfig(advantage_scale="none", token_weighting="ktae", ktae_alpha=alpha), 4)
    seq = [r - sum(rewards) / 4 for r in rewards]  # Dr. GRPO: centred only
    holds = [set(ids[i, :lengths[i]].tolist()) for i in range(4)]
    pos, neg = [i for i in range(4) if seq[i] > 0], [i for i in range(4) if seq[i] < 0]
    d = lambda v: sum(v in holds[i] for i in pos) / len(pos) - sum(v in holds[i] for i in neg) / len(neg)
    expected = [[seq[i] * (1 + alpha * math.copysign(1, seq[i]) * d(int(ids[i, t]))) if t < lengths[i] else 0.0
                 for t in range(4)] for i in range(4)]
    torch.testing.assert_close(batch.advantages, torch.tensor(expected), atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------- loss maths directly


def test_gspo_gradient_with_per_token_advantages_is_token_level():
    """GSPO-token: d loss_t / d logp_t = -sg(s_i) A_t (unclipped); no gradient flows through s_i to
    the other tokens. Differs from the sequence-level form when advantages vary within a sequence."""
    from aha.algorithms import gspo_surrogate

    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    old = torch.zeros(3, 4)
    logp = torch.tensor([[0.2, -0.1, 0.05, 0.0], [0.4, 0.3, 0.0, 0.0], [-0.1, 0.05, 0.0, 0.1]], requires_grad=True)
    adv = torch.tensor([[1.0, -2.0, 0.5, 0.0], [0.3, 1.5, 0.0, 0.0], [-1.0, 2.0, 0.5, -0.5]])
    loss, clipped = gspo_surrogate(logp, old, adv, mask, clip_low=0.1, clip_high=0.1)
    (loss * mask).sum().backward()
    s = [math.exp(0.15 / 3), math.exp(0.7 / 2), math.exp(0.05 / 4)]  # sequence 2 (1.42) is outside 1 +- 0.1
    expected_grad = torch.zeros(3, 4)
    for i in range(3):
        for t in range(4):
            if mask[i, t]:
                a = float(adv[i, t])
                unclipped = s[i] * a <= min(max(s[i], 0.9), 1.1) * a
                expected_grad[i, t] = -s[i] * a if unclipped else 0.0
    torch.testing.assert_close(logp.grad, expected_grad, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loss.detach() * mask, torch.tensor(
        [[-min(s[i] * float(adv[i, t]), min(max(s[i], 0.9), 1.1) * float(adv[i, t])) * float(mask[i, t])
          for t in range(4)] for i in range(3)]), atol=1e-6, rtol=1e-6)
    assert clipped[1, 1] and not clipped[0].any()


def test_truncated_is_weights_by_hand():
    from aha.algorithms import truncated_is_weights

    trainer = torch.log(torch.tensor([0.5, 0.2, 0.9]))
    engine = torch.log(torch.tensor([0.25, 0.4, 0.3]))
    torch.testing.assert_close(truncated_is_weights(trainer, engine, 2.5), torch.tensor([2.0, 0.5, 2.5]))


def test_overlong_penalty_scales_with_its_factor():
    from aha.algorithms import overlong_penalty
    from aha.training.rl.score import shaped_rewards

    lengths = torch.tensor([2, 5, 6, 8])
    torch.testing.assert_close(overlong_penalty(lengths, 8, 4, factor=0.5), torch.tensor([0.0, -0.125, -0.25, -0.5]))
    torch.testing.assert_close(overlong_penalty(lengths, 8, 4, factor=3.0), torch.tensor([0.0, -0.75, -1.5, -3.0]))
    ro = mask_rollouts(lengths_mask(lengths.tolist(), 8))
    algo = AlgorithmConfig(overlong_buffer=4, overlong_penalty=0.5)
    torch.testing.assert_close(shaped_rewards(torch.ones(4), ro, algo, 8), torch.tensor([1.0, 0.875, 0.75, 0.5]))
    # the length cost charges the correct ones (total >= length_correct_min) by coef * length / max
    algo = AlgorithmConfig(length_correct_min=0.9)
    torch.testing.assert_close(shaped_rewards(torch.tensor([1.0, 0.0, 0.95, 0.5]), ro, algo, 8, length_coef=0.4),
                               torch.tensor([1.0 - 0.1, 0.0, 0.95 - 0.3, 0.5]))
    algo = AlgorithmConfig(length_penalize="all")
    torch.testing.assert_close(shaped_rewards(torch.tensor([1.0, 0.0, 0.95, 0.5]), ro, algo, 8, length_coef=0.4),
                               torch.tensor([1.0 - 0.1, -0.25, 0.95 - 0.3, 0.5 - 0.4]))


# ---------------------------------------------------------------- rewards


GATE_REWARDS = """
def score(completion, sample):
    return 2.0

def gate(completion, sample):
    return float(completion)

def half(completion, sample):
    return 0.5

def big(completion, sample):
    return 3.0
"""


def test_a_failing_gate_zeroes_the_total_and_a_passing_one_leaves_it_whole(tmp_path):
    from aha.rewards import build_reward

    (tmp_path / "parts.py").write_text(GATE_REWARDS)
    reward = build_reward([
        RewardSpec(fn="parts.py:score", weight=1.5),
        RewardSpec(fn="parts.py:big", weight=0.5, clip_max=1.0),  # clipped before weighting: +0.5
        RewardSpec(fn="parts.py:gate", combine="gate", gate_min=0.8),
        RewardSpec(fn="parts.py:half", combine="product"),
    ], tmp_path)
    result = reward.score(["0.5", "0.8", "0.95", "1.7", "0", "-1", "oops"], [{"id": str(i)} for i in range(7)])
    whole = (1.5 * 2.0 + 0.5 * 1.0) * 0.5
    assert result.total.tolist() == [0.0, whole, whole, whole, 0.0, 0.0, 0.0]
    assert result.failed.tolist() == [False] * 6 + [True]  # float('oops') raised: the gate is closed
    assert result.components["gate"].tolist() == pytest.approx([0.5, 0.8, 0.95, 1.7, 0.0, -1.0, 0.0])
    assert result.components["big"].tolist() == [3.0] * 7  # logged unclipped and unweighted


def test_boxed_answer_wins_over_a_later_number():
    from aha.rewards import extract_answer, numeric_answer

    assert extract_answer("so \\boxed{12}, checked with 3 tries and 4 more") == 12.0
    assert extract_answer("7 then \\boxed{-2.5} (not 9)") == -2.5
    assert extract_answer("no box: 3 and finally 41") == 41.0
    assert extract_answer("\\boxed{3}, no wait: \\boxed{4}. Done in 2") == 4.0  # the last box
    assert numeric_answer("\\boxed{56} since 7 * 8 = 56 and 8", {"answer": "56"}) == 1.0
    assert numeric_answer("\\boxed{54} though 56", {"answer": "56"}) == 0.0


@pytest.mark.parametrize("text, answer", [
    ("The answer is 3. On reflection, \\boxed{5}", "5"),
    ("\\boxed{5}. On reflection, the answer is 3.", "3"),
    ("<answer>4</answer> Final answer: 9", "9"),
    ("Final answer: 9\n<answer>4</answer>", "4"),
    ("\\boxed{1} then <answer>2</answer>", "2"),
    ("<answer>2</answer> then \\boxed{1}", "1"),
    ("Answer: 7\n\\boxed{8}\nThe answer is 6", "6"),
    ("\\boxed{8} <answer>5</answer> \\boxed{9}", "9"),
], ids=["line-box", "box-line", "tag-line", "line-tag", "box-tag", "tag-box", "line-box-line", "box-tag-box"])
def test_the_last_stated_answer_wins_whatever_its_form(text, answer):
    from aha.rewards.extract import final_answer, stated_answers

    assert final_answer(text) == answer
    found = stated_answers(text)
    assert [s.start for s in found] == sorted(s.start for s in found)


def test_math_answer_takes_the_last_stated_answer():
    from aha.rewards import math_answer

    assert math_answer("The answer is 3. On reflection, \\boxed{5}", {"answer": "5"}) == 1.0
    assert math_answer("\\boxed{5}. On reflection, the answer is 3.", {"answer": "5"}) == 0.0


# ---------------------------------------------------------------- evaluation


def test_bootstrap_interval_is_95_percent():
    """For the mean of 400 values the 95% percentile interval is ~ mean +- 1.96 standard errors
    (a 90% one would be +- 1.645, 16% narrower)."""
    from aha.eval.compare import summarize
    from aha.eval.estimators import bootstrap_ci

    values = np.random.default_rng(1).random((400, 1))
    se = values.std(ddof=1) / math.sqrt(len(values))
    lo, hi = bootstrap_ci(values, draws=4000, seed=3)
    assert (hi[0] - lo[0]) / (2 * 1.959964 * se) == pytest.approx(1.0, abs=0.05)
    # the curves aha eval --samples reports carry the same 95% band
    hits = np.random.default_rng(2).random(400) < 0.4
    by_problem = {f"p{i:03d}": [{"completion": "x", "score": float(h), "answer": "1", "length": 1, "truncated": False}]
                  for i, h in enumerate(hits)}
    curve = summarize(by_problem)["curves"]["pass@k"]
    p = hits.mean()
    assert curve["mean"] == [pytest.approx(p)]
    normal_width = 2 * 1.959964 * math.sqrt(p * (1 - p) / 400)
    assert (curve["hi"][0] - curve["lo"][0]) / normal_width == pytest.approx(1.0, abs=0.07)


def test_pass_at_k_by_enumeration():
    from itertools import combinations

    from aha.eval.estimators import pass_at_k

    for n, c, k in [(5, 2, 2), (6, 1, 3), (7, 3, 4), (4, 0, 2), (4, 4, 1), (8, 5, 8)]:
        subsets = list(combinations([True] * c + [False] * (n - c), k))
        assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets), abs=1e-12)


# ---------------------------------------------------------------- config


def test_prorl_reset_options_need_a_kl_term():
    for reset in ("algorithm.ref_reset_kl=0.1", "algorithm.ref_reset_every=3"):
        with pytest.raises(ConfigError, match="need algorithm.kl_coef > 0"):
            load_config(None, ["model=tiny", reset])
        assert load_config(None, ["model=tiny", reset, "algorithm.kl_coef=0.05"]).algorithm.kl_coef == 0.05
    with pytest.raises(ConfigError, match="tis_cap needs algorithm.old_logprobs=trainer"):
        load_config(None, ["model=tiny", "algorithm.tis_cap=2"])


def test_an_override_value_may_contain_equals_signs():
    raw = {"task": {"name": "arithmetic"}}
    apply_override(raw, "task.system_prompt=a=b")
    assert raw == {"task": {"name": "arithmetic", "system_prompt": "a=b"}}
    apply_override(raw, " train.steps =7")
    assert raw["train"] == {"steps": 7}
    config = load_config(None, ["model=tiny", "task.system_prompt=x = y == z", "task.template={a}={op}{b}?"])
    assert config.task.system_prompt == "x = y == z" and config.task.template == "{a}={op}{b}?"
    with pytest.raises(ConfigError, match="not of the form key=value"):
        apply_override({}, "train.steps")


def test_step_rewards_are_paid_where_their_steps_close_and_the_rest_at_the_last_token():
    # a process reward model's dense form: with reinforce_pp (no group baseline) the advantage
    # at t is the discounted sum of the per-token rewards from t on, whitened over the batch
    from aha.training.rl.estimate import estimate_advantages

    lengths, rewards, gamma = [4, 2, 5, 3], [1.5, 0.0, 0.5, 2.0], 0.7
    mask = lengths_mask(lengths, 5)
    steps = torch.zeros(4, 5)
    steps[0, 1], steps[0, 3], steps[2, 0], steps[2, 2], steps[3, 4] = 0.4, 0.6, 0.3, 0.1, 9.0  # [3, 4] is padding
    batch = Batch(mask_rollouts(mask), torch.tensor(rewards), step_rewards=steps)
    algo = AlgorithmConfig(advantage="reinforce_pp", gamma=gamma, group_baseline=False, whiten_advantages=False)
    estimate_advantages(batch, algo, 2)
    token = [[0.0, 0.4, 0.0, 0.6 + (1.5 - 1.0), 0.0],  # 1.5 - (0.4 + 0.6) remains for the last token
             [0.0, 0.0 + 0.0, 0, 0, 0],
             [0.3, 0.0, 0.1, 0.0, 0.5 - 0.4],
             [0.0, 0.0, 2.0, 0.0, 0.0]]  # a step reward on padding is not paid
    returns = [[sum(gamma ** (k - t) * token[i][k] for k in range(t, L)) if t < L else 0.0 for t in range(5)]
               for i, L in enumerate(lengths)]
    expected = torch.tensor(whiten(returns, mask.tolist()), dtype=torch.float32)
    torch.testing.assert_close(batch.advantages, expected, atol=1e-5, rtol=1e-5)
    # a sequence-level estimator sees only the sums: the same advantages as without steps
    dense, plain = Batch(mask_rollouts(mask), torch.tensor(rewards),
                         step_rewards=steps), Batch(mask_rollouts(mask), torch.tensor(rewards))
    for b in (dense, plain):
        estimate_advantages(b, AlgorithmConfig(advantage="grpo"), 2)
    torch.testing.assert_close(dense.advantages, plain.advantages, atol=1e-6, rtol=1e-6)


def test_a_step_reward_lands_on_the_token_that_closes_its_step():
    from aha.models.tiny import tiny_tokenizer
    from aha.training.rl.score import step_tokens

    tok = tiny_tokenizer()  # one token per character
    texts = ["ab\ncd\nef", "x\ny"]
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    mask = lengths_mask([len(i) for i in ids], max(len(i) for i in ids))
    rollouts = mask_rollouts(mask)
    rollouts.completion_ids = torch.tensor([i + [tok.pad_token_id] * (mask.shape[1] - len(i)) for i in ids])
    rollouts.texts = texts
    # steps end after "ab\n" (3 chars), "ab\ncd\n" (6) and with the text (8): the last step closes
    # at the stop token, where the model decided it was over; "x\n" (2) twice adds up
    out = step_tokens([[(3, 0.5), (6, 0.25), (8, 1.0)], [(2, 0.1), (2, 0.2)]], rollouts, tok)[0]
    assert out[0].tolist() == pytest.approx([0, 0, 0.5, 0, 0, 0.25, 0, 0, 1.0])
    assert out[1].tolist() == pytest.approx([0, 0.3, 0, 0, 0, 0, 0, 0, 0])
