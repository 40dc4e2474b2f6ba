"""Reading a training checkpoint as a model: a run's checkpoints/step-N folders, newest
last, and one module's safetensors weights loaded strictly. Writing them, with optimizer
and RNG state, is training's (training/checkpoint.py)."""

from __future__ import annotations

import re
from pathlib import Path

from safetensors.torch import load_model

STEP_DIR = re.compile(r"^step-(\d+)$")


def list_checkpoints(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def load_weights(model, folder: Path, name: str = "model") -> None:
    """Load NAME.safetensors into model strictly. A LoRA run's policy checkpoint (an adapter
    folder) goes into the model's adapters when it has them (resuming), else is added to the
    model and folded into its weights (evaluating a checkpoint on its base model)."""
    from aha.models.adapters import has_lora, is_adapter_folder, load_adapter, merge_lora

    if name == "model" and is_adapter_folder(Path(folder)):
        resuming = has_lora(model)
        load_adapter(model, Path(folder))
        if not resuming:
            merge_lora(model)
        return
    path = Path(folder) / f"{name}.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a checkpoint: no {name}.safetensors")
    load_model(model, str(path), strict=True)  # raises on any missing or unexpected tensor

