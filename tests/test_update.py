"""The policy update on the tiny model: logged losses are the differentiated ones, micro-batching
changes nothing, epochs and mini-batches do what they say."""

import copy

import pytest
import torch

from aha.algorithms import LossNorm, aggregate, kl_estimate
from aha.config import AlgorithmConfig
from aha.models import load
from aha.models.value import ValueModel
from aha.rollout import HFEngine
from aha.training.logprobs import completion_hidden, token_stats
from aha.training.rl.batch import Batch
from aha.training.rl.estimate import estimate_advantages
from aha.training.rl.update import Learner, Shape, forward_logprobs, forward_values, policy_loss, policy_update

G = 4


def scored_batch(seed=0):
    """3 groups of 4 tiny-model samples with made-up rewards that vary within groups."""
    torch.manual_seed(seed)
    lm = load("tiny", seed=seed)
    engine = HFEngine(lm.model, lm.tokenizer, max_new_tokens=6, temperature=1.0, batch_size=16)
    prompts = [lm.tokenizer.encode(t) for t in ("12*3=", "7+", "<|im_start|>user\nhi<|im_end|>\n")]
    ro = engine.generate(prompts, group_size=G)
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 1.0, 0.2, 0.9, 0.1, 0.0])
    return lm, Batch(ro, rewards)


def prepared(lm, batch, algo, shape, ref=None, critic=None):
    batch.old_logprobs = batch.rollouts.sampling_logprobs
    if ref is not None:
        batch.ref_logprobs = forward_logprobs(ref, batch, shape)
    if critic is not None:
        batch.old_values = forward_values(critic, batch, shape)
    estimate_advantages(batch, algo, G)
    return batch


def full_batch_loss(model, batch, algo, shape, constant):
    """The loss written out once over the whole batch, independently of the update code."""
    ro = batch.rollouts
    hidden = completion_hidden(model.base_model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask)
    stats = token_stats(model, hidden, ro.completion_ids, ro.completion_mask, shape.temperature, "grad")
    mask, norm = ro.completion_mask, LossNorm.of(ro.completion_mask, constant)
    loss_tok, _ = policy_loss(algo, stats.logprobs, batch.old_logprobs, batch.advantages, mask)
    loss = aggregate(loss_tok, mask, algo.loss_agg,
                     norm) - algo.entropy_coef * aggregate(stats.entropy, mask, algo.loss_agg, norm)
    if algo.kl_coef:
        loss = loss + algo.kl_coef * aggregate(kl_estimate(stats.logprobs, batch.ref_logprobs, algo.kl_estimator), mask,
                                               algo.loss_agg, norm)
    return loss


@pytest.mark.parametrize("algo_kwargs", [
    {"loss_agg": "token_mean"},
    {"loss_agg": "seq_mean_token_sum", "policy_loss": "pg"},
    {"loss_agg": "seq_mean_token_mean", "policy_loss": "gspo"},
    {"loss_agg": "constant", "advantage_scale": "none", "policy_loss": "cispo", "entropy_coef": 0.01},
    {"advantage": "rloo", "kl_coef": 0.1, "kl_estimator": "k2"},
])
def test_logged_loss_is_the_full_batch_loss_and_micro_batching_changes_nothing(algo_kwargs):
    algo = AlgorithmConfig(**algo_kwargs)
    lm, batch = scored_batch()
    ref = copy.deepcopy(lm.model) if algo.kl_coef else None
    if ref is not None:  # move the policy away from the reference so the KL term is non-zero
        with torch.no_grad():
            for p in lm.model.parameters():
                p.add_(0.01 * torch.randn_like(p))
    grads, losses = [], []
    for micro in (4, 8, 12):  # 1, 2 and 3 groups per micro-batch
        model = copy.deepcopy(lm.model)
        shape = Shape(G, micro, share_prompt=micro != 8, temperature=1.0, dtype=torch.float32)
        b = prepared(lm, copy.deepcopy(batch), algo, shape, ref)
        expected = full_batch_loss(model, b, algo, shape, constant=6)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: keep the weights to read the gradient
        metrics = policy_update(Learner(model, opt, ref), b, algo, shape, max_grad_norm=1e9, loss_constant=6)
        assert metrics["loss/total"] == pytest.approx(float(expected.detach()), abs=1e-6)
        losses.append(metrics["loss/total"])
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    for g in grads[1:]:
        torch.testing.assert_close(g, grads[0], atol=1e-6, rtol=1e-4)
    assert grads[0].abs().sum() > 0


def test_epochs_and_mini_batches_take_that_many_steps_and_ratio_starts_at_one():
    lm, batch = scored_batch()
    algo = AlgorithmConfig(epochs=2, mini_batches=3, clip_low=0.2, clip_high=0.2)
    shape = Shape(G, 4, True, 1.0, torch.float32)
    b = prepared(lm, batch, algo, shape)
    opt = torch.optim.AdamW(lm.model.parameters(), lr=5e-2)
    torch.manual_seed(0)
    metrics = policy_update(Learner(lm.model, opt), b, algo, shape, max_grad_norm=1.0, loss_constant=6)
    assert metrics["optimizer_steps"] == 6
    assert metrics["tokens/trained"] == int(batch.rollouts.completion_mask.sum())
    # later steps are off-policy: the ratio moves and the clip engages
    assert metrics["policy/clip_frac"] > 0 and metrics["kl/old"] > 0
    # mini-batches hold whole groups: more parts than groups is capped at the group count
    algo = AlgorithmConfig(mini_batches=10)
    assert policy_update(Learner(lm.model, opt), b, algo, shape, 1.0, 6)["optimizer_steps"] == 3


def test_first_step_ratio_is_one_up_to_engine_trainer_mismatch():
    lm, batch = scored_batch()
    algo = AlgorithmConfig()
    shape = Shape(G, 12, True, 1.0, torch.float32)
    b = prepared(lm, batch, algo, shape)
    metrics = policy_update(Learner(lm.model, torch.optim.SGD(lm.model.parameters(), lr=0.0)), b, algo, shape, 1.0, 6)
    assert metrics["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["kl/old"] == pytest.approx(0.0, abs=1e-6) and metrics["policy/clip_frac"] == 0


def test_critic_learns_the_returns():
    lm, batch = scored_batch()
    algo = AlgorithmConfig(advantage="gae", value_clip=None)
    critic = ValueModel(lm.model)
    shape = Shape(G, 12, True, 1.0, torch.float32)
    learner = Learner(lm.model, torch.optim.SGD(lm.model.parameters(), lr=0.0), None, critic,
                      torch.optim.AdamW(critic.parameters(), lr=1e-3))
    b = prepared(lm, batch, algo, shape, critic=critic)
    assert b.old_values.abs().sum() == 0  # zero-initialised head: first advantages are the returns
    torch.testing.assert_close(b.returns[:, 0], batch.rewards)
    first = policy_update(learner, b, algo, shape, 1.0, 6)["loss/value"]
    for _ in range(50):
        last = policy_update(learner, b, algo, shape, 1.0, 6)["loss/value"]
    assert last < 0.2 * first
    # before the first completion token the state is the prompt alone, shared by the group:
    # the best value there is the group's mean return
    values = forward_values(critic, b, shape)[:, 0].view(-1, G)[:, 0]
    torch.testing.assert_close(values, batch.rewards.view(-1, G).mean(dim=1), atol=0.03, rtol=0)


def test_the_configs_policy_losses_are_the_registrys():
    import typing

    from aha.config import AlgorithmConfig
    from aha.training.rl.update import POLICY_LOSSES

    assert set(typing.get_args(AlgorithmConfig.model_fields["policy_loss"].annotation)) == set(POLICY_LOSSES)


def test_the_configs_advantage_estimators_are_the_registrys():
    import typing

    from aha.config import AlgorithmConfig
    from aha.training.rl.estimate import SEQUENCE_ESTIMATORS, TOKEN_ESTIMATORS

    assert not set(SEQUENCE_ESTIMATORS) & set(TOKEN_ESTIMATORS)
    assert set(typing.get_args(AlgorithmConfig.model_fields["advantage"].annotation)) == (
        set(SEQUENCE_ESTIMATORS) | set(TOKEN_ESTIMATORS))
