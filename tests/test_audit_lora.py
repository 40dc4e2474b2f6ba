"""LoRA adapters (aha.models.adapters, config lora.*): the adapters' update is scaled by
alpha / rank with alpha's documented default of 2 x rank, and a model with its adapters
folded in (merge_lora, or an adapter checkpoint loaded as `model:`) trains every weight."""

import pytest
from test_training import tiny_config

from aha.config import ConfigError
from aha.models import load
from aha.models.adapters import add_lora, has_lora, lora_layers, merge_lora, save_adapter

pytest.importorskip("peft")


def scalings(model) -> set[float]:
    """The scale of every LoRA layer's update (peft: lora_alpha / r)."""
    layers = lora_layers(model)
    assert layers
    return {float(layer.scaling["default"]) for _, layer in layers}


@pytest.mark.parametrize("rank", [2, 8])
def test_the_default_alpha_scales_the_update_by_two(tmp_path, rank):
    """Catches a wrong default for lora.alpha (None -> 2 x rank): in the config section, or in
    add_lora's fallback (e.g. alpha = rank, scale 1)."""
    config = tiny_config(tmp_path, "run", f"lora.rank={rank}")
    assert config.lora.alpha is None
    model = load("tiny").model
    add_lora(model, config.lora.rank, config.lora.alpha)
    assert scalings(model) == {2.0}
    assert {layer.r["default"] for _, layer in lora_layers(model)} == {rank}


@pytest.mark.parametrize("rank, alpha, scale", [(4, 12, 3.0), (8, 4, 0.5)])
def test_a_set_alpha_scales_the_update_by_alpha_over_rank(tmp_path, rank, alpha, scale):
    """Catches lora.alpha ignored (or read as the scale itself) when it is set."""
    config = tiny_config(tmp_path, "run", f"lora.rank={rank}", f"lora.alpha={alpha}")
    model = load("tiny").model
    add_lora(model, config.lora.rank, config.lora.alpha)
    assert scalings(model) == {scale}


def test_an_alpha_of_zero_is_refused(tmp_path):
    """Catches lora.alpha's bound loosened to >= 0: alpha 0 scales every update to nothing,
    so the adapters never change the model."""
    with pytest.raises(ConfigError, match="config key 'lora.alpha' .*greater than 0"):
        tiny_config(tmp_path, "run", "lora.rank=4", "lora.alpha=0")


def test_merge_lora_leaves_every_weight_trainable():
    """Catches merge_lora leaving the base weights frozen (peft froze them): a full fine-tune
    from a LoRA checkpoint would then have nothing to train."""
    model = load("tiny").model
    add_lora(model, rank=4)
    assert any(not p.requires_grad for p in model.parameters())  # peft froze the base
    merged = merge_lora(model)
    assert merged is model and not has_lora(model)
    assert all(p.requires_grad for p in model.parameters())
    assert len(list(model.parameters())) == len(list(load("tiny").model.parameters()))


def test_an_adapter_checkpoint_loaded_as_the_model_trains_every_weight(tmp_path):
    """Catches the same through load(adapter folder) (model: a LoRA run's checkpoint, the
    start of a full fine-tune): every weight of the loaded model must need a gradient."""
    model = load("tiny").model
    add_lora(model, rank=4, base="tiny")
    save_adapter(model, tmp_path)
    loaded = load(str(tmp_path)).model
    assert not has_lora(loaded)
    assert all(p.requires_grad for p in loaded.parameters())
