"""Checkpoints: weights (safetensors), optimizer, RNG and data cursor, written atomically.

A checkpoint folder is also a Hugging Face model folder (config, generation config,
tokenizer with its chat template), so `model: runs/x/checkpoints/step-N` loads it."""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import random
import shutil
import types
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_model

from aha.config import ConfigError
from aha.models.adapters import has_lora, save_adapter
from aha.models.checkpoints import MANIFEST, list_checkpoints, load_weights, sha256_file, verify_checkpoint
from aha.tracking.faults import kill_point
from aha.tracking.run_dir import RunWriteError, free_space
from aha.training.distributed import Ranks, shared
from aha.training.shards import load_optimizer_state

log = logging.getLogger(__name__)


def rng_state() -> dict:
    """Every generator a run draws from: the CPU's (sampling draws there on every device), Python's,
    NumPy's, and this process's GPU's once CUDA is in use (LoRA dropout runs there)."""
    state = {"torch": torch.random.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.random.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():  # a GPU run resumed on the CPU leaves it be
        torch.cuda.set_rng_state(state["cuda"])


def save_checkpoint(root: Path, step: int, modules: dict, optimizers: dict, trainer_state: dict, keep: int,
                    extra: dict | None = None, tokenizer=None, files: dict[str, str] | None = None,
                    keep_also: int | None = None) -> Path:
    """Write checkpoints/step-N/ via a temporary folder and one rename, so a crash never
    leaves a half-written checkpoint that resume would pick up; then prune old ones.

    modules: name -> nn.Module, each saved as NAME.safetensors (a policy with LoRA adapters:
    the adapter, adapter_model.safetensors + adapter_config.json); "model" (the policy) also
    gets its config.json, generation_config.json and `tokenizer` (files and chat template),
    so the folder loads as a model. optimizers (each an optimizer, or its state dict gathered
    from the learner ranks) and extra (picklable training
    state such as a replay buffer) go into trainer.pt with the RNG states. files: name ->
    text written beside them (a reward model's reward_model.json). keep_also: a step whose
    checkpoint is kept besides the newest `keep` (the best evaluated one)."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp"
    for stale in root.glob(".step-*.tmp"):  # left by a kill mid-write: never a checkpoint
        shutil.rmtree(stale, ignore_errors=True)
    try:
        _write(tmp, modules, optimizers, trainer_state, step, extra, tokenizer, files)
    except BaseException as err:  # a half-written folder is never left behind
        shutil.rmtree(tmp, ignore_errors=True)
        if not isinstance(err, Exception):  # Ctrl-C, SystemExit: as they are
            raise
        kept = list_checkpoints(root)
        # a full disk shows as OSError(ENOSPC), torch's zip writer's RuntimeError or safetensors' own error
        advice = ("free some space and run again with train.resume=true" if _disk_full(err, root)
                  else "run again with train.resume=true once the cause is fixed")
        raise CheckpointError(
            f"could not write checkpoint {final}: {type(err).__name__}: {err} ({free_space(root)}). "
            + (f"The newest whole checkpoint, {kept[-1]}, is intact: " if kept else "No checkpoint was written: ")
            + advice) from None
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    _fsync(root)  # the rename itself on disk before an older checkpoint is deleted
    kill_point("checkpoint-renamed")  # whole, the older ones not pruned yet
    for old in list_checkpoints(root)[:-keep]:
        if old.name != f"step-{keep_also}":
            shutil.rmtree(old)
    return final


def best_evaluated_step(records: list[dict], steps: set[int]) -> int | None:
    """Of the steps with a checkpoint, the one whose held-out evaluation scored best (the
    later one on a tie); None when none of them was evaluated."""
    scored = [(r["eval/accuracy"], r["step"]) for r in records
              if r.get("eval/accuracy") is not None and r.get("step") in steps]
    return max(scored)[1] if scored else None


def _disk_full(err: BaseException, root: Path) -> bool:
    if getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "No space left" in str(err):
        return True
    try:
        return shutil.disk_usage(root).free < 64 << 20
    except OSError:
        return False


class CheckpointError(RunWriteError):
    """A checkpoint could not be written (the disk is full, the folder read-only)."""


def _write(tmp: Path, modules: dict, optimizers: dict, trainer_state: dict, step: int, extra, tokenizer, files) -> None:
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
    kill_point("checkpoint")  # weights written, the rest not yet
    states = {k: o if isinstance(o, dict) else o.state_dict() for k, o in optimizers.items()}
    torch.save({"optimizers": states, "rng": rng_state(),
                "extra": extra or {}}, tmp / "trainer.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **trainer_state}, indent=1))
    for name, text in (files or {}).items():
        (tmp / name).write_text(text)
    # written last: a checkpoint whose files do not all match it is damaged (verify_checkpoint)
    manifest = {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
                for p in sorted(tmp.rglob("*")) if p.is_file()}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    # on disk before the rename: after a power cut the renamed folder holds its files, not
    # empty ones, so pruning the older checkpoints never leaves no whole one
    for path in [*sorted(tmp.rglob("*")), tmp]:
        _fsync(path)


def _fsync(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to the disk. A folder is best effort:
    Windows cannot open one, and some network and FUSE mounts refuse to flush one."""
    folder = path.is_dir()
    if folder and os.name == "nt":
        return
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        if not (folder and err.errno in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES, errno.EBADF)):
            raise


def non_finite_tensors(modules: dict, optimizers: dict) -> list[str]:
    """Names of the weights and optimizer state tensors holding NaN or inf (a checkpoint
    written by a run that let one through must not be trained on again)."""
    bad = [f"{name}.{key}" for name, module in modules.items() for key, t in module.state_dict().items()
           if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    for name, optimizer in optimizers.items():
        states = optimizer["state"] if isinstance(optimizer, dict) else optimizer.state  # a state dict gathered whole
        for index, state in enumerate(states.values()):
            bad += [f"{name} optimizer state {index}.{key}" for key, t in state.items()
                    if torch.is_tensor(t) and t.is_floating_point() and not bool(torch.isfinite(t).all())]
    return bad


# Modules that moved since checkpoints were first written: trainer.pt pickles some objects (a
# replay buffer's batches) by the module their class lived in, so older checkpoints name these.
MOVED_MODULES = {
    **{f"aha.training.{name}": f"aha.training.rl.{name}"
       for name in ("batch", "collect", "estimate", "partial", "replay", "step", "update")},
    "aha.training.rl": "aha.training.rl.method",
    **{f"aha.training.{name}": f"aha.training.supervised.{name}"
       for name in ("dpo", "kto", "online_pairs", "prm", "reward_model", "sequences", "sft")},
    "aha.training.selection": "aha.eval.selection",
    "aha.tasks.prompts": "aha.prompts",
    "aha.tasks.errors": "aha.errors",
}


class _MovedClassesUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        return super().find_class(MOVED_MODULES.get(module, module), name)


MOVED_CLASSES_PICKLE = types.SimpleNamespace(__name__="pickle", Unpickler=_MovedClassesUnpickler, load=pickle.load)


def load_checkpoint(folder: Path | None, modules: dict, optimizers: dict, ranks: Ranks = Ranks()) -> tuple[dict, dict]:
    """Restore weights, optimizers and RNG; return (state.json, extra). With several learner
    ranks, rank 0 reads the folder (None on the others) into its whole modules, every rank's
    optimizer takes its slice of the saved state, and every rank gets the same RNG, state and
    extra (the shards take the weights after: Shards.push)."""
    blob = state = None
    if ranks.is_main:
        for name, module in modules.items():
            load_weights(module, folder, name, verify=False)  # the loop verified the folder before choosing it
        # onto the CPU, whatever device saved it: the optimizers move their moments to their parameters'
        blob = torch.load(folder / "trainer.pt", map_location="cpu", weights_only=False,
                          pickle_module=MOVED_CLASSES_PICKLE)
        state = json.loads((folder / "state.json").read_text())
    for name, optimizer in optimizers.items():
        load_optimizer_state(optimizer, blob["optimizers"][name] if ranks.is_main else None, ranks)
    if ranks.distributed:
        blob = shared({"rng": blob["rng"], "extra": blob["extra"], "state": state} if ranks.is_main else None, ranks)
        state = blob["state"]
    set_rng_state(blob["rng"])
    return state, blob["extra"]


def agreed_rng_state(ranks: Ranks) -> None:
    """Every rank takes rank 0's random state (rank 0 samples and evaluates alone)."""
    if ranks.distributed:
        set_rng_state(shared(rng_state() if ranks.is_main else None, ranks))


def load_changed(folder, modules: dict, optimizers: dict, changes: dict, ranks: Ranks = Ranks()) -> tuple[dict, dict]:
    """load_checkpoint, with an error naming the config changes when they do not fit the checkpoint
    (a critic, a reference model or a replay buffer that it does or does not hold)."""
    try:
        return load_checkpoint(folder, modules, optimizers, ranks)
    except (FileNotFoundError, KeyError, RuntimeError, ValueError) as err:
        if not changes:
            raise
        raise ConfigError(f"checkpoint {folder} does not fit the changed config ({', '.join(changes)}): {err}; "
                          "pick a new output_dir for these changes") from None


def whole_checkpoints(checkpoints: list[Path], echo) -> list[Path]:
    """The checkpoints up to the newest whole one (its files as its manifest lists them).
    Each damaged newer one (a bit flipped on disk, a file cut short) is named and renamed
    damaged-step-N beside the others for a look; the whole one before it is used. With none
    whole, nothing is moved and the run stops, saying so."""
    damage = {}
    for index in range(len(checkpoints) - 1, -1, -1):
        damage[index] = verify_checkpoint(checkpoints[index])
        if damage[index] is None:
            break
    else:
        raise ConfigError(f"no whole checkpoint in {checkpoints[0].parent}: " + "; ".join(
            f"{checkpoints[i].name}: {why}" for i, why in sorted(damage.items())) + ". Pick a new output_dir (or "
            "move this run folder away) to start again")
    for bad in range(len(checkpoints) - 1, index, -1):
        folder = checkpoints[bad]
        aside = folder.with_name(f"damaged-{folder.name}")
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(folder, aside)
        log.error("checkpoint %s is damaged (%s); moved to %s", folder, damage[bad], aside)
        echo(f"checkpoint {folder} is damaged ({damage[bad]}): moved to {aside}; resuming from {checkpoints[index]}")
    return checkpoints[:index + 1]
