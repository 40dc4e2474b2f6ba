"""The bf16 path, forced with dtype=bfloat16 so that it runs on every CPU (emulated where the
CPU has no native bf16, which is slow but fine for the tiny model): the matmuls run in bf16,
the weights and the optimizer stay fp32, and the trainer's log-probs agree with the engine's
to bf16 precision. `auto` picks bf16 only where the CPU runs it natively."""

import pytest
import torch

import aha.models.compute as precision
from aha.algorithms import masked_mean
from aha.config import AlgorithmConfig
from aha.models import load
from aha.rollout import HFEngine
from aha.training.rl.batch import Batch
from aha.training.rl.estimate import estimate_advantages
from aha.training.rl.update import Learner, Shape, forward_logprobs, policy_update

G = 4


def test_resolve_dtype(monkeypatch):
    assert precision.resolve_dtype("float32") == torch.float32
    assert precision.resolve_dtype("bfloat16") == torch.bfloat16
    for native, expected in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(precision, "native_bf16", lambda: native)
        assert precision.resolve_dtype("auto") == expected
    assert isinstance(precision.autocast(torch.float32), type(precision.contextlib.nullcontext()))


def matmul_dtypes(model):
    """Records the output dtype of every nn.Linear the backbone runs (the trainer runs the LM
    head on its hidden states in fp32, for the log-softmax)."""
    seen = set()
    for module in model.base_model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
    return seen


@pytest.fixture(scope="module")
def sampled():
    """3 groups of 4 tiny-model samples drawn under bf16 autocast, with rewards that vary."""
    torch.manual_seed(0)
    lm = load("tiny", seed=0)
    seen = matmul_dtypes(lm.model)
    engine = HFEngine(lm.model, lm.tokenizer, max_new_tokens=6, temperature=1.0, batch_size=16, dtype=torch.bfloat16)
    prompts = [lm.tokenizer.encode(t) for t in ("12*3=", "7+", "hi")]
    ro = engine.generate(prompts, group_size=G)
    assert seen == {torch.bfloat16}  # the engine sampled in bf16
    seen.clear()
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 0.0, 0.0, 1.0, 1.0, 0.2, 0.9, 0.1, 0.0])
    return lm, seen, ro, rewards


def test_bf16_trainer_logprobs_agree_with_the_engine_to_bf16_precision(sampled):
    lm, seen, ro, rewards = sampled
    batch = Batch(ro, rewards)
    bf16 = forward_logprobs(lm.model, batch, Shape(G, 12, True, 1.0, torch.bfloat16))
    assert seen == {torch.bfloat16}
    mask = ro.completion_mask
    diff = float(masked_mean((bf16 - ro.sampling_logprobs).abs(), mask))
    # bf16 keeps 8 significant bits: engine (KV cache) and trainer (full forward) round apart,
    # by ~4e-4 on the tiny model, not by the <1e-6 of fp32
    assert diff < 5e-3
    assert bf16.dtype == torch.float32  # log-probs come out in fp32 for the loss
    seen.clear()
    fp32 = forward_logprobs(lm.model, batch, Shape(G, 12, True, 1.0, torch.float32))
    assert seen == {torch.float32}
    assert float(masked_mean((fp32 - bf16).abs(), mask)) < 5e-3


def test_one_bf16_update_keeps_fp32_weights_and_moves_them(sampled):
    lm, seen, ro, rewards = sampled
    model = lm.model
    shape = Shape(G, 4, True, 1.0, torch.bfloat16)
    batch = Batch(ro, rewards)
    algo = AlgorithmConfig(old_logprobs="trainer")
    estimate_advantages(batch, algo, G)
    batch.old_logprobs = forward_logprobs(model, batch, shape)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    seen.clear()
    metrics = policy_update(Learner(model, optimizer), batch, algo, shape, max_grad_norm=1.0, loss_constant=6)
    assert seen == {torch.bfloat16}  # the forward of the update ran under autocast
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert metrics["grad_norm"] > 0 and metrics["optimizer_steps"] == 1
    # on-policy against the trainer's own bf16 log-probs: the ratio is 1 to bf16 precision
    assert metrics["policy/ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    for name, p in model.named_parameters():
        assert p.dtype == torch.float32 and p.grad.dtype == torch.float32, name
    for state in optimizer.state.values():
        assert all(v.dtype == torch.float32 for v in state.values() if v.is_floating_point())
    assert any(not torch.equal(before[name], p) for name, p in model.named_parameters())


@pytest.mark.parametrize("method", ["sft", "simpo", "kto"])
def test_each_sequence_method_trains_under_bf16_autocast_to_bf16_precision(tmp_path, caplog, method):
    # their exact-value tests pin fp32; here the same first step under bf16 autocast: the loss
    # agrees with fp32's to bf16 precision, and the run says which dtype it computed in
    import logging

    from test_dpo import dpo_config
    from test_kto import kto_config
    from test_sft import sft_config
    from test_training import metrics

    from aha.training.loop import train

    # DPO's first loss is log 2
    simpo = lambda tmp, name, *overrides: dpo_config(tmp, name, "dpo.loss=simpo", *overrides)
    # KTO's first loss is 0.5 in any dtype (policy = reference): its policy log-probs show the dtype
    make, key = {"sft": (sft_config, "sft/loss"), "simpo": (simpo, "pref/loss"),
                 "kto": (kto_config, "logps/desirable")}[method]
    losses = {}
    for dtype in ("bfloat16", "float32"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="aha.training.loop"):
            train(make(tmp_path, dtype, f"train.dtype={dtype}", "train.lr=0", "train.steps=1"), echo=lambda *_: None)
        assert f"compute dtype torch.{dtype}" in caplog.text
        losses[dtype] = metrics(tmp_path / dtype)[0][key]
    assert losses["bfloat16"] == pytest.approx(losses["float32"], rel=1e-2)
    assert losses["bfloat16"] != losses["float32"]  # it did compute in bf16
