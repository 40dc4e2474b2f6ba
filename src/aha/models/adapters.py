"""LoRA adapters on the policy, from peft: added in place, saved and loaded in peft's own
format, and folded back into plain weights (for vLLM, for evaluation, for export).

The adapters go into the Hugging Face model itself (peft's inject_adapter_in_model), not
into a PeftModel wrapper: the model keeps its class and its `base_model`, so the learner,
the HF engine and the checkpoints see the same object with or without adapters. peft
freezes every weight but the adapters' A and B matrices.

A checkpoint of a LoRA run holds the adapter alone, as peft writes one
(adapter_model.safetensors + adapter_config.json naming its base model): a few MB instead
of the whole model, and loadable by peft and vLLM as an adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from aha.models.errors import ModelNotFound
from aha.models.hub import parse

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
# a PeftModel's tensor names start so (PeftModel.base_model: LoraModel, its .model: ours)
PEFT_PREFIX = "base_model.model."


def _peft():
    try:
        import peft
    except ImportError as err:  # an optional extra
        raise ImportError("lora.rank > 0 needs peft: pip install 'aha[lora]' (peft==0.21.2)") from err
    return peft


def add_lora(model: torch.nn.Module, rank: int, alpha: float | None = None, dropout: float = 0.0,
             target_modules: str | list[str] = "all-linear", base: str | None = None) -> torch.nn.Module:
    """LoRA adapters of `rank` on target_modules ("all-linear": every Linear but the LM
    head), scaled by alpha / rank (alpha default 2 x rank); everything else frozen. `base`
    is what the adapter's config names as its base model. Returns model, changed in place."""
    peft = _peft()
    tied = getattr(model.config, "tie_word_embeddings", False)
    named = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    if tied and any(name in ("lm_head", "embed_tokens") for name in named):
        # merging into one of the two would change the other, which shares its weight
        raise ValueError(f"lora.target_modules {target_modules!r}: this model ties its LM head to its embeddings; "
                         "adapters on either are not supported")
    base, revision = _hub_base(base)
    config = peft.LoraConfig(r=rank, lora_alpha=alpha if alpha is not None else 2 * rank, lora_dropout=dropout,
                             target_modules=target_modules, base_model_name_or_path=base, revision=revision,
                             task_type="CAUSAL_LM")
    try:
        return peft.inject_adapter_in_model(config, model)
    except ValueError as err:  # peft names the modules it could not find
        raise ValueError(f"lora.target_modules {target_modules!r}: {err}") from None


def _hub_base(base: str | None) -> tuple[str | None, str | None]:
    """A Hub base `owner/name@revision` as peft records it: the id and its `revision` apart."""
    parsed = parse(base) if base and not Path(base).expanduser().is_dir() else None
    return parsed if parsed and parsed[1] else (base, None)


def lora_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(qualified name, layer) of every peft LoRA layer in model."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # without peft there are none
        return []
    return [(name, module) for name, module in model.named_modules() if isinstance(module, LoraLayer)]


def has_lora(model: torch.nn.Module) -> bool:
    return bool(lora_layers(model))


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """What the optimizer updates: every parameter, or with adapters the adapters' alone
    (AdamW then keeps no state for the frozen weights)."""
    return [p for p in model.parameters() if p.requires_grad]


def save_adapter(model: torch.nn.Module, folder: Path) -> None:
    """The adapters' weights and config as peft writes them, into folder."""
    peft = _peft()
    from safetensors.torch import save_file

    state = peft.get_peft_model_state_dict(model)
    # named as a PeftModel saves them (its wrappers' prefix), so peft and vLLM read the file
    save_file({PEFT_PREFIX + k: v.detach().contiguous() for k, v in state.items()},
              str(Path(folder) / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    model.peft_config["default"].save_pretrained(str(folder))


def is_adapter_folder(folder: Path) -> bool:
    return (Path(folder) / ADAPTER_CONFIG).is_file()


def adapter_base(folder: Path) -> str:
    """The base model an adapter folder names (adapter_config.json's base_model_name_or_path,
    with `@revision` when it records a Hub revision)."""
    path = Path(folder) / ADAPTER_CONFIG
    try:
        about = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable adapter config ({err})") from None
    base, revision = about.get("base_model_name_or_path"), about.get("revision")
    if not base:
        raise ValueError(f"{path} names no base model (base_model_name_or_path)")
    return f"{base}@{revision}" if revision else base


def _refuse_other_hub_base(model: torch.nn.Module, folder: Path) -> None:
    """A resumed LoRA run whose Hub base model now resolves to another commit than its adapters
    were trained on (a branch that moved on the Hub) would train them on other weights."""
    ours = model.peft_config["default"]
    ours = f"{ours.base_model_name_or_path}@{ours.revision}" if ours.revision else ours.base_model_name_or_path
    try:
        theirs = adapter_base(folder)
    except ValueError:  # adapters made in code name no base: nothing to compare (the fit is checked next)
        return
    pinned = [parse(b) for b in (ours, theirs) if b and not Path(b).expanduser().is_dir()]
    if len(pinned) == 2 and all(p and p[1] for p in pinned) and ours != theirs:
        raise ModelNotFound(f"{folder}: its adapters were trained on the Hub model {theirs}, but the run's model "
                            f"resolves to {ours} now (the branch moved): set model: {theirs} to resume")


def load_adapter(model: torch.nn.Module, folder: Path) -> None:
    """Put an adapter folder's weights into model: into its adapters when it has them (a
    resumed run), else adapters are added as the folder's config says first."""
    peft = _peft()
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / ADAPTER_WEIGHTS).is_file():
        raise FileNotFoundError(f"{folder} is not an adapter checkpoint: no {ADAPTER_WEIGHTS}")
    if has_lora(model):
        _refuse_other_hub_base(model, folder)
    else:
        peft.inject_adapter_in_model(peft.LoraConfig.from_pretrained(str(folder)), model)
    state = {k.removeprefix(PEFT_PREFIX): v for k, v in load_file(str(folder / ADAPTER_WEIGHTS)).items()}
    result = peft.set_peft_model_state_dict(model, state)
    missing = [k for k in result.missing_keys if "lora_" in k]
    if missing or result.unexpected_keys:
        raise ValueError(f"{folder / ADAPTER_WEIGHTS} does not fit the model's adapters: "
                         f"missing {missing[:3]}, unexpected {list(result.unexpected_keys)[:3]}")


def plain_lora_linear(module: torch.nn.Module) -> bool:
    """A peft LoRA layer over a plain Linear whose effect is its weight plus its adapters'
    B A products (no DoRA or other variant, not merged, adapters enabled)."""
    try:
        from peft.tuners.lora import Linear as LoraLinear
    except ImportError:
        return False
    active = [a for a in module.active_adapters if a in module.lora_A] if type(module) is LoraLinear else []
    return (bool(active) and type(module.get_base_layer()) is torch.nn.Linear
            and not module.merged and not module.disable_adapters and not module.fan_in_fan_out
            and not any(module.use_dora.get(a, False) or module.lora_variant.get(a) is not None
                        or module.lora_bias.get(a, False) for a in active))


def effective_weight(linear: torch.nn.Module) -> torch.Tensor:
    """The (out, in) weight a Linear, or a plain LoRA layer over one, multiplies by:
    W, or W + alpha / r * B A summed over its active adapters (a new tensor)."""
    if type(linear) is torch.nn.Linear:
        return linear.weight
    weight = linear.get_base_layer().weight
    if linear.merged or linear.disable_adapters:  # the base weight already holds them, or they are off
        return weight
    if not plain_lora_linear(linear):
        raise TypeError(f"{type(linear).__name__} is neither a Linear nor a plain LoRA layer over one")
    for adapter in linear.active_adapters:
        if adapter in linear.lora_A:
            weight = weight + linear.get_delta_weight(adapter).to(weight.dtype)
    return weight


def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's tensors under the plain model's names, each adapter folded into the weight
    it adapts (W + alpha / r * B A): what the model computes, as weights any loader of the
    base architecture takes. Without adapters, the state dict itself."""
    layers = dict(lora_layers(model))
    if not layers:
        return model.state_dict()
    out = {}
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:
            continue
        owner, _, leaf = name.rpartition(".")
        if owner.endswith(".base_layer") and owner[:-len(".base_layer")] in layers:
            layer = layers[owner[:-len(".base_layer")]]
            if leaf == "weight":
                tensor = effective_weight(layer)
            name = f"{owner[:-len('.base_layer')]}.{leaf}"
        out[name] = tensor.detach()
    return out


def plain_tensors(model: torch.nn.Module, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """merged_state_dict in `dtype` on the CPU, contiguous and detached, for another process to
    load: names that share one storage (a tied output layer and the embedding) share one
    tensor, converted once."""
    out, converted = {}, {}
    for name, tensor in merged_state_dict(model).items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key not in converted:
            converted[key] = tensor.detach().to("cpu", dtype).contiguous()
        out[name] = converted[key]
    return out


def merge_lora(model: torch.nn.Module) -> torch.nn.Module:
    """Fold every adapter into its weight and put the plain layers back: model becomes the
    base architecture again (for sampling and export; not for further LoRA training)."""
    for name, layer in lora_layers(model):
        layer.merge()
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer.get_base_layer())
    if hasattr(model, "peft_config"):
        del model.peft_config
    return model.requires_grad_(True)
