"""Reading a training checkpoint as a model: a run's checkpoints/step-N folders, newest
last, and one module's safetensors weights loaded strictly. Writing them, with optimizer
and RNG state, is training's (training/checkpoint.py)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from safetensors import SafetensorError
from safetensors.torch import load_model

from aha.models.errors import ModelNotFound

STEP_DIR = re.compile(r"^step-(\d+)$")
MANIFEST = "manifest.json"  # each file's size and sha256, written last into a checkpoint


def checkpoint_step(folder: Path) -> int:
    """N of a checkpoints/step-N folder."""
    return int(STEP_DIR.match(Path(folder).name).group(1))


def list_checkpoints(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def load_weights(model, folder: Path, name: str = "model", verify: bool = True) -> None:
    """Load NAME.safetensors into model strictly. A LoRA run's policy checkpoint (an adapter
    folder) goes into the model's adapters when it has them (resuming), else is added to the
    model and folded into its weights (evaluating a checkpoint on its base model). verify:
    check the folder against its manifest first (a checkpoint damaged on disk would load
    silently wrong weights)."""
    from aha.models.adapters import ADAPTER_WEIGHTS, has_lora, is_adapter_folder, load_adapter, merge_lora

    adapter = name == "model" and is_adapter_folder(Path(folder))
    if verify:
        refuse_damaged(folder, ADAPTER_WEIGHTS if adapter else f"{name}.safetensors")
    if adapter:
        resuming = has_lora(model)
        load_adapter(model, Path(folder))
        if not resuming:
            merge_lora(model)
        return
    path = Path(folder) / f"{name}.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a checkpoint: no {name}.safetensors")
    try:
        load_model(model, str(path), strict=True)  # raises on any missing or unexpected tensor
    except (RuntimeError, KeyError, ValueError, OSError, SafetensorError) as err:  # damaged, or another model's
        raise ModelNotFound(f"{path}: its weights cannot be loaded into this model "
                            f"({type(err).__name__}: {' '.join(str(err).split())[:400]})") from None


def refuse_damaged(folder: Path, weights: str) -> None:
    """An error naming the damage when an aha checkpoint's weights file (`weights`, the one
    about to be loaded) differs from the checkpoint's manifest. Only that file: a user may
    edit its config or tokenizer files (an adapter's base model moved) or delete weights
    not needed (a critic), and a broken config fails loudly as it loads."""
    folder = Path(folder)
    if (folder / MANIFEST).is_file() and (folder / "state.json").is_file():  # written by aha's training loop
        damage = verify_checkpoint(folder, only={weights})
        if damage:
            raise ModelNotFound(f"checkpoint {folder} is damaged: {damage} (if you replaced {weights} on purpose, "
                                f"delete {folder / MANIFEST})")


def hash_into(digest, path: Path, chunk: int = 1 << 24) -> None:
    """Feed a file's bytes to a hashlib digest a chunk at a time (weights files are GBs)."""
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    hash_into(digest, path)
    return digest.hexdigest()


def verify_checkpoint(folder: Path, only: set[str] | None = None) -> str | None:
    """Why the checkpoint folder is damaged (a file missing, shorter or longer, or changed
    since it was written, against its manifest), or None when it is whole. A checkpoint
    written before manifests existed is taken as it is. only: these files of the manifest
    alone (one not listed there is not checked)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None if (Path(folder) / "state.json").is_file() else f"no {MANIFEST} and no state.json"
    try:
        manifest = json.loads(path.read_text())
        entries = [(name, int(e["bytes"]), str(e["sha256"])) for name, e in manifest.items()
                   if only is None or name in only]
    except (OSError, ValueError, AttributeError, TypeError, KeyError) as err:
        return f"{MANIFEST} unreadable ({type(err).__name__}: {err})"
    try:
        for name, size, _ in entries:  # sizes first: a file cut short is found without reading anything
            file = Path(folder) / name
            if not file.is_file():
                return f"{name} is missing"
            if file.stat().st_size != size:
                return f"{name} has {file.stat().st_size} bytes, {size} when written"
        for name, _, digest in entries:
            if sha256_file(Path(folder) / name) != digest:
                return f"{name} changed since it was written (its sha256 differs)"
    except OSError as err:
        return f"unreadable ({err})"
    return None

