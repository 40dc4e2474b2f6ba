"""The engine seam (rollout/engine.py): one factory, the config's choices, and training that
uses nothing of an engine but the Engine protocol, syncing weights after every step."""

import typing
from pathlib import Path

import pytest
import torch
from test_training import metrics, tiny_config

from aha.config import RolloutConfig, load_config
from aha.models import load
from aha.rollout import ENGINES, HFEngine, Rollouts, build_engine
from aha.training.loop import train


def test_the_config_offers_auto_and_exactly_the_known_engines():
    assert typing.get_args(RolloutConfig.model_fields["engine"].annotation) == ("auto", *ENGINES)


def test_auto_builds_the_hf_engine_with_the_rollout_settings():
    tiny = load("tiny")
    rollout = RolloutConfig(max_new_tokens=7, temperature=0.5, top_p=0.9, batch_size=3)
    engine = build_engine(rollout, tiny.model, tiny.tokenizer, torch.float32, max_new_tokens=11, self_certainty=True)
    assert isinstance(engine, HFEngine)
    assert (engine.max_new_tokens, engine.temperature, engine.top_p, engine.batch_size, engine.self_certainty) == (
        11, 0.5, 0.9, 3, True)
    engine.sync_weights(tiny.model)  # its own model: nothing to do
    with pytest.raises(ValueError, match="samples from the model it was built on"):
        engine.sync_weights(load("tiny").model)


class RecordingEngine:
    """An engine of another kind: it keeps its own copy of the weights, so it samples from the
    policy only if training hands it the new weights after each step."""

    def __init__(self, inner: HFEngine, policy: torch.nn.Module):
        import copy

        self.policy = policy
        self.inner = HFEngine(copy.deepcopy(policy), inner.tokenizer, inner.max_new_tokens, inner.temperature,
                              inner.top_p, inner.batch_size, inner.dtype)
        self.tokenizer, self.pad_id, self.eos_ids = inner.tokenizer, inner.pad_id, inner.eos_ids
        self.batch_size, self.max_new_tokens = inner.batch_size, inner.max_new_tokens
        self.synced, self.stale_generations, self.sync_seconds, self.closed = 0, 0, 0.0, False

    def generate(self, prompts, group_size=1, greedy=False, max_new_tokens=None) -> Rollouts:
        copy_state, policy_state = self.inner.model.state_dict(), self.policy.state_dict()
        self.stale_generations += not all(torch.equal(copy_state[k], policy_state[k]) for k in policy_state)
        return self.inner.generate(prompts, group_size, greedy, max_new_tokens)

    def sync_weights(self, model) -> None:
        assert model is self.policy
        import time

        t0 = time.time()
        self.inner.model.load_state_dict(model.state_dict())
        self.synced += 1
        self.sync_seconds += time.time() - t0

    def close(self) -> None:
        self.closed = True


def test_training_uses_only_the_engine_protocol_and_syncs_after_every_step(tmp_path, monkeypatch):
    import aha.training.loop as loop

    engines = []

    def recording(rollout, model, tokenizer, dtype, **kwargs):
        engines.append(RecordingEngine(build_engine(rollout, model, tokenizer, dtype, **kwargs), model))
        return engines[-1]

    monkeypatch.setattr(loop, "build_engine", recording)
    train(tiny_config(tmp_path, "run", "train.steps=3", "eval.before=true", "eval.after=true", "eval.limit=2"),
          echo=lambda *_: None)
    engine = engines[0]
    assert engine.synced == 3 and engine.stale_generations == 0  # every sampling saw the current weights
    assert engine.closed  # the run let go of it
    records = [r for r in metrics(tmp_path / "run") if "reward/mean" in r]
    assert len(records) == 3 and all(r["time/sync_s"] > 0 for r in records)
    # resumed: the engine is built over the starting weights, before the checkpoint is loaded
    train(tiny_config(tmp_path, "run", "train.steps=5", "train.allow_config_change=true"), echo=lambda *_: None)
    assert engines[1].stale_generations == 0 and engines[1].synced == 1 + 2 and engines[1].closed


def test_an_unknown_engine_is_a_config_error():
    from aha.config import ConfigError

    with pytest.raises(ConfigError, match="rollout.engine"):
        load_config(None, ["rollout.engine=vllm_typo"])


def test_vllm_without_its_environment_is_an_error_naming_the_keys(tmp_path):
    from aha.rollout.vllm_engine import VLLMEngineError

    tiny = load("tiny")
    rollout = RolloutConfig(engine="vllm", vllm_python=str(tmp_path / "nowhere/python"))
    with pytest.raises(VLLMEngineError, match=r"needs the Python of an environment with vLLM .*rollout.vllm_python"):
        build_engine(rollout, tiny.model, tiny.tokenizer, torch.float32)
    with pytest.raises(ValueError, match="cannot report self-certainty"):
        build_engine(rollout, tiny.model, tiny.tokenizer, torch.float32, self_certainty=True)
    with pytest.raises(VLLMEngineError, match=r"samples with top_p=1 only \(rollout.top_p=0.9\)"):
        build_engine(rollout.model_copy(update={"top_p": 0.9}), tiny.model, tiny.tokenizer, torch.float32)


def test_auto_falls_back_to_the_hf_engine_when_vllm_does_not_start(tmp_path, monkeypatch, caplog):
    # a Python without vLLM: the worker fails at its import, the engine says why and auto goes on
    import logging
    import sys

    from aha.rollout.llama_decoding import LlamaDecoding

    tiny = load("tiny")
    monkeypatch.setenv("AHA_VLLM_PYTHON", sys.executable)
    # a model without the lean step
    monkeypatch.setattr(LlamaDecoding, "fits", staticmethod(lambda model, cache=None: False))
    before = set(Path("/dev/shm").glob("aha-vllm-*"))
    with caplog.at_level(logging.WARNING, logger="aha.rollout.engine"):
        engine = build_engine(RolloutConfig(engine="auto", max_new_tokens=128), tiny.model, tiny.tokenizer,
                              torch.float32)
    assert isinstance(engine, HFEngine)
    assert "vLLM at" in caplog.text and "did not start" in caplog.text and "No module named 'vllm'" in caplog.text
    assert set(Path("/dev/shm").glob("aha-vllm-*")) == before  # the failed worker's folder is gone


def test_auto_samples_short_budgets_with_the_hf_engine_without_starting_vllm(monkeypatch, caplog):
    # up to AUTO_VLLM_ABOVE_TOKENS new tokens the HF engine measured as fast or faster: no
    # worker is started (this Python has no vLLM: trying would log that it did not start)
    import logging
    import sys

    from aha.rollout.engine import AUTO_VLLM_ABOVE_TOKENS

    tiny = load("tiny")
    monkeypatch.setenv("AHA_VLLM_PYTHON", sys.executable)
    with caplog.at_level(logging.WARNING, logger="aha.rollout.engine"):
        engine = build_engine(RolloutConfig(engine="auto", max_new_tokens=16), tiny.model, tiny.tokenizer,
                              torch.float32)
        at_limit = build_engine(RolloutConfig(engine="auto"), tiny.model, tiny.tokenizer, torch.float32,
                                max_new_tokens=AUTO_VLLM_ABOVE_TOKENS)
    assert isinstance(engine, HFEngine) and isinstance(at_limit, HFEngine)
    assert "vLLM" not in caplog.text


def test_auto_samples_models_with_the_lean_decoding_step_with_the_hf_engine_at_any_budget(monkeypatch, caplog):
    # the HF engine's lean Llama step measured as fast as vLLM or faster at 128 and 256 tokens
    import logging
    import sys

    tiny = load("tiny")
    monkeypatch.setenv("AHA_VLLM_PYTHON", sys.executable)
    with caplog.at_level(logging.WARNING, logger="aha.rollout.engine"):
        engine = build_engine(RolloutConfig(engine="auto", max_new_tokens=512), tiny.model, tiny.tokenizer,
                              torch.float32)
    assert isinstance(engine, HFEngine) and "vLLM" not in caplog.text
