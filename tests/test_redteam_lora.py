"""Red team: LoRA settings that reach peft (dropout, the default targets), an adapter file
that does not fit the model's adapters, and effective_weight of disabled adapters."""

from types import SimpleNamespace

import pytest
import torch
from test_training import tiny_config

from aha.config import ConfigError
from aha.models import load
from aha.models.adapters import add_lora, effective_weight, load_adapter, lora_layers, save_adapter
from aha.training.loop import _load_policy

pytest.importorskip("peft")

LINEARS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}


def test_the_policy_gets_lora_dropout_and_adapters_on_every_linear_but_the_head(tmp_path):
    """Catches lora.dropout not handed to peft (the adapters would train without it) and a
    wrong default for lora.target_modules (documented: all-linear, every Linear but the LM head)."""
    config = tiny_config(tmp_path, "run", "lora.rank=4", "lora.dropout=0.25")
    assert config.lora.target_modules == "all-linear"
    model, _, _ = _load_policy(config, SimpleNamespace(name="t", train=[], eval=[]))
    layers = lora_layers(model)
    assert {name.rpartition(".")[2] for name, _ in layers} == LINEARS
    linears = [n for n, m in load("tiny").model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    assert len(layers) == len(linears)
    assert {layer.lora_dropout["default"].p for _, layer in layers} == {0.25}


@pytest.mark.parametrize("dropout", ["1", "1.5", "-0.1"])
def test_a_lora_dropout_outside_0_to_1_is_refused(tmp_path, dropout):
    """Catches lora.dropout's upper bound loosened to <= 1: dropout 1 zeroes every adapter input."""
    with pytest.raises(ConfigError, match="lora.dropout"):
        tiny_config(tmp_path, "run", "lora.rank=4", f"lora.dropout={dropout}")


def test_an_adapter_file_missing_some_of_the_models_adapters_is_refused(tmp_path):
    """Catches load_adapter ignoring the model's adapters the file lacks: they would keep
    their fresh initialisation, silently, after a resume."""
    source = load("tiny").model
    add_lora(source, 4, target_modules=["q_proj"])
    save_adapter(source, tmp_path)
    target = load("tiny").model
    add_lora(target, 4)  # all-linear: more adapters than the file holds
    with pytest.raises(ValueError, match="does not fit the model's adapters: missing"):
        load_adapter(target, tmp_path)


def test_the_effective_weight_of_disabled_adapters_is_the_base_weight():
    """Catches effective_weight raising (or adding the adapters) for a layer whose adapters are
    disabled: what the layer computes then is its base weight alone."""
    model = load("tiny").model
    add_lora(model, 4)
    _, layer = lora_layers(model)[0]
    torch.manual_seed(0)
    torch.nn.init.normal_(layer.lora_B["default"].weight)  # a non-zero update
    base = layer.get_base_layer().weight
    assert not torch.equal(effective_weight(layer), base)
    layer.enable_adapters(False)
    assert torch.equal(effective_weight(layer), base)
    layer.enable_adapters(True)
    assert not torch.equal(effective_weight(layer), base)
