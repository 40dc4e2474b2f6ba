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
    path = Path(folder) / f"{name}.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a checkpoint: no {name}.safetensors")
    load_model(model, str(path), strict=True)  # raises on any missing or unexpected tensor
