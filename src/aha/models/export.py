"""`aha export`: a run's checkpoint as a standard Hugging Face model folder (safetensors
weights, config, generation config, tokenizer and chat template) that transformers and vLLM
load with no aha installed. A LoRA run's adapter is folded into its base model's weights."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch

from aha.models.checkpoints import list_checkpoints

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def checkpoint_to_export(source: Path, checkpoint: str | None = None) -> Path:
    """The checkpoint folder `source` means: a run folder's newest checkpoint (or the one
    --checkpoint names: step-N, N, or a checkpoint folder), or a checkpoint folder itself."""
    source = Path(source)
    if not source.is_dir():
        raise FileNotFoundError(f"{source} is not a folder (a run folder or a checkpoints/step-N folder)")
    found = list_checkpoints(source / "checkpoints")
    if checkpoint is not None:
        step = checkpoint if checkpoint.startswith("step-") else f"step-{checkpoint}"
        if not (source / "checkpoints" / step).is_dir() and Path(checkpoint).is_dir():
            return Path(checkpoint)
        wanted = source / "checkpoints" / step
        if not wanted.is_dir():
            have = ", ".join(p.name for p in found) or "none"
            raise FileNotFoundError(f"{wanted} does not exist (checkpoints of {source}: {have})")
        return wanted
    if found:
        return found[-1]
    if (source / "checkpoints").is_dir():
        raise FileNotFoundError(f"{source / 'checkpoints'} holds no step-N checkpoint yet")
    return source


def _run_seed(checkpoint: Path) -> int:
    """The seed of the run a checkpoint belongs to (its config.yaml two folders up): the seed
    the `tiny` test model's random base weights were made from; 0 when there is none."""
    import yaml

    config = checkpoint.parent.parent / "config.yaml"
    try:
        return int((yaml.safe_load(config.read_text()) or {}).get("seed", 0))
    except (OSError, ValueError, TypeError, yaml.YAMLError):
        return 0


def export(source: Path, out: Path, checkpoint: str | None = None, dtype: str = "float32",
           overwrite: bool = False) -> Path:
    """Write the model of `source` (see checkpoint_to_export) to `out`; returns out. The
    folder appears whole or not at all (written beside it, then renamed). An existing
    non-empty `out` is replaced only with overwrite."""
    from aha.models import load

    out = Path(out)
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r}: one of {', '.join(DTYPES)}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty: choose another folder or pass --overwrite")
    folder = checkpoint_to_export(Path(source), checkpoint)
    if out.resolve() in (Path(source).resolve(), *Path(source).resolve().parents) or \
            out.resolve() in (folder.resolve(), *folder.resolve().parents):
        raise ValueError(f"{out} holds the run or checkpoint being exported: choose a folder outside it")
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is a file: choose a folder")
    loaded = load(str(folder), seed=_run_seed(folder))  # a LoRA adapter comes back folded into its base
    model = loaded.model.to(DTYPES[dtype])
    model.config.dtype = DTYPES[dtype]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        loaded.tokenizer.save_pretrained(tmp)  # tokenizer files and the chat template
        tmp.chmod(0o755)  # mkdtemp made it private; an exported model is for others to read
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
