"""NaN and inf never reach the weights: a non-finite reward is a failed sample, a non-finite
loss or gradient skips its optimizer step, and the step's reward statistics stay finite."""

import copy
import logging
from pathlib import Path

import torch
from safetensors.torch import load_file
from test_training import metrics, tiny_config
from test_update import G, prepared, scored_batch

from aha.config import AlgorithmConfig
from aha.models import load
from aha.models.value import ValueModel
from aha.rewards.compose import Component, CompositeReward
from aha.training.loop import train
from aha.training.rl.update import Learner, Shape, policy_update

NAN, INF = float("nan"), float("inf")
QUIET = lambda *_: None
SAMPLES = [{"id": f"s{i}"} for i in range(4)]


def by_sample(values):
    """A reward function that returns values[i] for the sample with id s{i}."""
    return lambda completion, sample: values[int(sample["id"][1:])]


def raises(completion, sample):
    raise RuntimeError("boom")


# -- 1. a non-finite component is a failure, exactly like one that raises ------------------

def test_nan_and_inf_components_fail_like_a_raising_one(caplog):
    bad = CompositeReward([Component("r", by_sample([1.0, NAN, INF, -INF]), weight=2.0),
                           Component("fmt", by_sample([0.5] * 4), weight=1.0)])
    with caplog.at_level(logging.WARNING, logger="aha.rewards.compose"):
        result = bad.score(["a"] * 4, SAMPLES)
        bad.score(["a"] * 4, SAMPLES)  # the same samples again: logged once per (function, id)
    warnings = [r.getMessage() for r in caplog.records]
    # the broken samples score 0 for that component, as a raising component does
    raising = CompositeReward([Component("r", raises, weight=2.0), Component("fmt", by_sample([0.5] * 4))])
    expected = raising.score(["a"] * 4, SAMPLES)
    assert result.failed.tolist() == [False, True, True, True] and expected.failed.all()
    assert result.total.tolist() == [2.5, 0.5, 0.5, 0.5]
    assert result.total.tolist()[1:] == expected.total.tolist()[1:]
    assert result.components["r"].tolist() == [1.0, 0.0, 0.0, 0.0]
    assert result.components["fmt"].tolist() == [0.5] * 4
    assert len(warnings) == 3
    assert all("reward r failed on sample" in w and "non-finite" in w for w in warnings)
    assert {w.split("sample ")[1].split(" ")[0] for w in warnings} == {"s1", "s2", "s3"}


def test_a_nan_gate_closes_and_a_nan_dict_part_fails_the_whole_component():
    gate = CompositeReward([Component("ok", by_sample([1.0] * 4)),
                            Component("gate", by_sample([1.0, NAN, 1.0, 1.0]), combine="gate")])
    result = gate.score(["a"] * 4, SAMPLES)
    assert result.total.tolist() == [1.0, 0.0, 1.0, 1.0] and result.failed.tolist() == [False, True, False, False]
    parts = CompositeReward([Component("d", by_sample([{"x": 1.0, "y": 2.0}, {"x": 1.0, "y": NAN}] * 2))])
    result = parts.score(["a"] * 4, SAMPLES)
    assert result.total.tolist() == [3.0, 0.0, 3.0, 0.0]
    assert result.components["d/x"].tolist() == [1.0, 0.0, 1.0, 0.0]
    assert result.failed.tolist() == [False, True, False, True]


def test_finite_parts_that_overflow_the_total_fail_too(caplog):
    big = CompositeReward([Component("a", by_sample([1e30, 1.0, 1e30, 2.0]), combine="sum"),
                           Component("b", by_sample([1e30, 1.0, 1.0, 3.0]), combine="product")])
    with caplog.at_level(logging.WARNING, logger="aha.rewards.compose"):
        result = big.score(["a"] * 4, SAMPLES)
    # float32: 1e30 * 1e30 is inf
    assert result.failed.tolist() == [True, False, False, False]
    assert result.total.tolist() == [0.0, 1.0, float(torch.tensor(1e30)), 6.0]
    assert "reward total failed on sample s0" in caplog.text


# -- 2. a non-finite loss or gradient never reaches the weights ----------------------------

def snapshot(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def assert_bitwise_equal(before, module):
    after = module.state_dict()
    assert before.keys() == after.keys()
    for k, v in before.items():
        assert torch.equal(v, after[k]), k


def test_a_nan_loss_skips_the_step_and_leaves_weights_and_optimizer_state_exactly_as_they_were(caplog):
    lm, batch = scored_batch()
    algo = AlgorithmConfig()
    shape = Shape(G, 4, True, 1.0, torch.float32)
    good = prepared(lm, copy.deepcopy(batch), algo, shape)
    bad = copy.deepcopy(good)
    bad.advantages[0, 0] = NAN  # one NaN advantage on a real token makes the loss NaN
    opt = torch.optim.AdamW(lm.model.parameters(), lr=1e-2)
    learner = Learner(lm.model, opt)
    # a real step first, so the optimizer has moments that a bad step could corrupt
    assert policy_update(learner, good, algo, shape, 1.0, 6)["train/skipped_updates"] == 0
    weights, moments = snapshot(lm.model), copy.deepcopy(opt.state_dict())
    with caplog.at_level(logging.WARNING, logger="aha.training.rl.update"):
        m = policy_update(learner, bad, AlgorithmConfig(mini_batches=3), shape, 1.0, 6)
    # the NaN is in group 0 only: one of three mini-batch steps is skipped, the others run
    assert m["train/skipped_updates"] == 1 and m["optimizer_steps"] == 3
    assert "skipped a policy optimizer step" in caplog.text
    for p in lm.model.parameters():
        assert torch.isfinite(p).all()
    # every mini-batch NaN: all skipped, and the weights and Adam moments are bitwise unchanged
    weights, moments = snapshot(lm.model), copy.deepcopy(opt.state_dict())
    bad.advantages[:, 0] = NAN
    m = policy_update(learner, bad, AlgorithmConfig(mini_batches=3), shape, 1.0, 6)
    assert m["train/skipped_updates"] == 3
    assert_bitwise_equal(weights, lm.model)
    assert opt.state_dict()["state"].keys() == moments["state"].keys()
    for k, state in moments["state"].items():
        for name, value in state.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(opt.state_dict()["state"][k][name])), name
    assert all(p.grad is None for p in lm.model.parameters())  # the NaN gradients were dropped
    # and the learner is not stuck: the next good batch trains again
    assert policy_update(learner, good, algo, shape, 1.0, 6)["train/skipped_updates"] == 0
    assert not all(torch.equal(v, lm.model.state_dict()[k]) for k, v in weights.items())


def test_an_inf_gradient_with_a_finite_loss_is_skipped(monkeypatch):
    lm, batch = scored_batch()
    algo = AlgorithmConfig()
    shape = Shape(G, 12, True, 1.0, torch.float32)
    b = prepared(lm, batch, algo, shape)
    learner = Learner(lm.model, torch.optim.SGD(lm.model.parameters(), lr=1e-2))
    weights = snapshot(lm.model)
    # the loss value stays finite; its gradient is inf
    import aha.training.rl.update as update

    class InfGrad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad * INF

    real = update.policy_loss

    def inf_grad_loss(*args):
        loss, clipped = real(*args)
        return InfGrad.apply(loss), clipped

    monkeypatch.setattr(update, "policy_loss", inf_grad_loss)
    m = policy_update(learner, b, algo, shape, 1.0, 6)
    assert m["loss/total"] == m["loss/total"] and abs(m["loss/total"]) != INF  # finite loss
    assert m["train/skipped_updates"] == 1
    assert_bitwise_equal(weights, lm.model)


def test_a_nan_value_loss_skips_the_critic_step_only():
    lm, batch = scored_batch()
    algo = AlgorithmConfig(advantage="gae", value_clip=None)
    critic = ValueModel(copy.deepcopy(lm.model))
    shape = Shape(G, 12, True, 1.0, torch.float32)
    learner = Learner(lm.model, torch.optim.SGD(lm.model.parameters(), lr=1e-2), None, critic,
                      torch.optim.AdamW(critic.parameters(), lr=1e-3))
    b = prepared(lm, batch, algo, shape, critic=critic)
    b.returns[0, 0] = NAN  # the value target is NaN, the policy's advantages are not
    policy, values = snapshot(lm.model), snapshot(critic)
    m = policy_update(learner, b, algo, shape, 1.0, 6)
    assert m["value/skipped_updates"] == 1 and m["train/skipped_updates"] == 0
    assert_bitwise_equal(values, critic)
    assert not all(torch.equal(v, lm.model.state_dict()[k]) for k, v in policy.items())


# -- end to end: NaN never reaches a checkpoint, and the statistics stay finite ------------

def finite_number(x):
    return x == x and abs(x) != INF


def test_a_reward_that_returns_nan_sometimes_never_reaches_a_checkpoint(tmp_path):
    (tmp_path / "flaky.py").write_text(
        "def score(completion, sample):\n"
        "    first = ord(completion[:1] or ' ') % 3\n"
        "    return float('nan') if first == 0 else float('inf') if first == 1 else 1.0\n")
    config = tiny_config(tmp_path, "nan", f"reward=[{{fn: '{tmp_path / 'flaky.py'}:score'}}]", "train.dtype=float32",
                         "train.steps=2", "train.checkpoint_every=2", "eval.before=false", "eval.after=false",
                         "train.max_reward_failure_rate=1.0")  # fails on ~2/3 of samples: train on regardless
    run = Path(train(config, echo=QUIET).run_dir)
    records = metrics(run)
    assert sum(r["reward/failed"] for r in records) > 0
    for r in records:
        assert finite_number(r["reward/mean"]) and finite_number(r["reward/std"]) and finite_number(r["reward/score"])
        assert finite_number(r["loss/total"]) and r["train/skipped_updates"] == 0
    weights = load_file(run / "checkpoints/step-2/model.safetensors")
    assert weights and all(torch.isfinite(w).all() for w in weights.values())


def test_a_nan_loss_in_the_loop_leaves_the_checkpoint_at_the_initial_weights(tmp_path, monkeypatch):
    import aha.training.rl.update as update

    monkeypatch.setattr(update, "policy_loss", lambda *a: (a[1] * NAN, torch.zeros_like(a[1])))
    config = tiny_config(tmp_path, "nanloss", "train.dtype=float32", "train.steps=2", "train.checkpoint_every=2",
                         "eval.before=false", "eval.after=false")
    run = Path(train(config, echo=QUIET).run_dir)
    assert [r["train/skipped_updates"] for r in metrics(run)] == [1, 1]
    initial = load("tiny", seed=config.seed).model.state_dict()
    weights = load_file(run / "checkpoints/step-2/model.safetensors")
    assert weights and all(torch.equal(w, initial[k]) for k, w in weights.items())


def test_reward_statistics_are_taken_over_finite_values(tmp_path, monkeypatch):
    # a reward object that lets a NaN total through (a custom scorer, say): the estimator
    # counts it in reward/nonfinite, and the sampled statistics ignore it
    real = CompositeReward.score

    def leaky(self, completions, samples, completion_tokens=None):
        result = real(self, completions, samples, completion_tokens)
        result.total[::3] = NAN
        for values in result.components.values():
            values[::3] = INF
        return result

    monkeypatch.setattr(CompositeReward, "score", leaky)
    config = tiny_config(tmp_path, "leaky", "train.dtype=float32", "train.steps=1", "train.checkpoint_every=1",
                         "eval.before=false", "eval.after=false")
    (r,) = metrics(Path(train(config, echo=QUIET).run_dir))
    assert r["reward/nonfinite"] > 0
    for key in ("reward/mean", "reward/std", "reward/verifier_mean", "reward/numeric_answer", "reward/format"):
        assert finite_number(r[key]), key
