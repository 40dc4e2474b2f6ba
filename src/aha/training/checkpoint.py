"""Checkpoints: weights (safetensors), optimizer, RNG and data cursor, written atomically.

A checkpoint folder is also a Hugging Face model folder (config, generation config,
tokenizer with its chat template), so `model: runs/x/checkpoints/step-N` loads it."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_model

from aha.models.adapters import has_lora, save_adapter
from aha.models.checkpoints import list_checkpoints, load_weights



def rng_state() -> dict:
    return {"torch": torch.random.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}


def set_rng_state(state: dict) -> None:
    torch.random.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def save_checkpoint(root: Path, step: int, modules: dict, optimizers: dict, trainer_state: dict, keep: int,
                    extra: dict | None = None, tokenizer=None, files: dict[str, str] | None = None) -> Path:
    """Write checkpoints/step-N/ via a temporary folder and one rename, so a crash never
    leaves a half-written checkpoint that resume would pick up; then prune old ones.

    modules: name -> nn.Module, each saved as NAME.safetensors (a policy with LoRA adapters:
    the adapter, adapter_model.safetensors + adapter_config.json); "model" (the policy) also
    gets its config.json, generation_config.json and `tokenizer` (files and chat template),
    so the folder loads as a model. optimizers and extra (picklable training
    state such as a replay buffer) go into trainer.pt with the RNG states. files: name ->
    text written beside them (a reward model's reward_model.json)."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, module in modules.items():
        if name == "model" and has_lora(module):  # a LoRA policy: its adapter alone, as peft writes one
            save_adapter(module, tmp)
        else:
            save_model(module, str(tmp / f"{name}.safetensors"))  # handles tied embeddings
    policy = modules["model"]
    policy.config.save_pretrained(tmp)
    if policy.generation_config is not None:
        policy.generation_config.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)  # tokenizer files and the chat template
    torch.save({"optimizers": {k: o.state_dict() for k, o in optimizers.items()}, "rng": rng_state(),
                "extra": extra or {}}, tmp / "trainer.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **trainer_state}, indent=1))
    for name, text in (files or {}).items():
        (tmp / name).write_text(text)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old)
    return final


def non_finite_tensors(modules: dict, optimizers: dict) -> list[str]:
    """Names of the weights and optimizer state tensors holding NaN or inf (a checkpoint
    written by a run that let one through must not be trained on again)."""
    bad = [f"{name}.{key}" for name, module in modules.items() for key, t in module.state_dict().items()
           if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    for name, optimizer in optimizers.items():
        for index, state in enumerate(optimizer.state.values()):
            bad += [f"{name} optimizer state {index}.{key}" for key, t in state.items()
                    if torch.is_tensor(t) and t.is_floating_point() and not bool(torch.isfinite(t).all())]
    return bad


def load_checkpoint(folder: Path, modules: dict, optimizers: dict) -> tuple[dict, dict]:
    """Restore weights, optimizers and RNG; return (state.json, extra)."""
    for name, module in modules.items():
        load_weights(module, folder, name)
    blob = torch.load(folder / "trainer.pt", weights_only=False)
    for name, optimizer in optimizers.items():
        optimizer.load_state_dict(blob["optimizers"][name])
    set_rng_state(blob["rng"])
    return json.loads((folder / "state.json").read_text()), blob["extra"]
