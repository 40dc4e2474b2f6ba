"""A run folder knows what it is: a resume compares the new resolved config with the run's
config.yaml and refuses changes to what is trained, unless the user asks to continue with them."""

from __future__ import annotations

import json
from pathlib import Path

from aha.config import Config, ConfigError, from_dict, read_mapping

# Keys that do not change what is trained: where the run lives, how long it runs (extending
# a run is allowed), bookkeeping, memory-only batch knobs, and held-out evaluation (it reads
# the policy, never changes it; a run stopped by an unfit eval.scorer resumes with a fitting one).
ALLOWED = frozenset({
    "output_dir", "base_dir", "device",  # where the models run: a checkpoint is the same files on any device
    "train.steps", "train.resume", "train.allow_config_change", "train.checkpoint_every", "train.keep_checkpoints",
                     "train.keep_best",
    "train.log_samples", "train.report", "train.max_reward_failure_rate", "train.max_idle_steps",
                     "train.micro_batch_size", "rollout.batch_size", "train.memory_check",
    "rm.eval_data",  # a reward model's held-out pairs are only scored
})
# (ray.*: where the samples are drawn, not what they are drawn from; distributed.*: how many
# processes take each step, which is the same step on any number: checkpoints load on any)
ALLOWED_SECTIONS = ("eval.", "ray.", "distributed.")
# Allowed, but held-out accuracies from before and after such a change are measured differently.
EVAL_MEASURE = ("eval.limit", "eval.max_new_tokens", "eval.scorer", "eval.correct_threshold")
# Keys no flag can change: the checkpoint's weights belong to the old model (or, for LoRA, to
# adapters of that shape and scale).
NEVER = frozenset({"model", "lora.rank", "lora.alpha", "lora.target_modules"})


def flatten(tree: dict, prefix: str = "") -> dict:
    """{"train": {"lr": 1}} -> {"train.lr": 1}; lists stay whole values."""
    flat = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


ABSENT = "<absent>"


def all_changes(old: dict, new: dict) -> dict[str, list]:
    """Dotted key -> [old, new] for every key whose value differs."""
    old_flat, new_flat = flatten(old), flatten(new)
    keys = sorted(old_flat.keys() | new_flat.keys())
    return {k: [old_flat.get(k, ABSENT),
                new_flat.get(k, ABSENT)] for k in keys if old_flat.get(k, ABSENT) != new_flat.get(k, ABSENT)}


def read_run_config(path: Path) -> dict:
    """The resolved config a run wrote, with defaults filled in for keys an older aha did not write."""
    raw = read_mapping(path)
    try:
        return from_dict(raw, str(path)).model_dump(mode="json")
    except ConfigError:  # written by another version: compare what it says
        return raw


def resume_changes(run_path: Path, config: Config) -> tuple[dict[str, list], list[str]]:
    """What a resume into run_path would change, from one read of its config.yaml: the
    changes to what is trained ({} when none), and the allowed eval keys that change how
    held-out accuracy is measured (for a note). Raises ConfigError when there are changes to
    what is trained and the user did not allow them, or when one can never be allowed."""
    path = run_path / "config.yaml"
    if not path.is_file():
        return {}, []
    drift = all_changes(read_run_config(path), config.model_dump(mode="json"))
    measured = [k for k in drift if k in EVAL_MEASURE]
    changes = {k: v for k, v in drift.items() if k not in ALLOWED and not k.startswith(ALLOWED_SECTIONS)}  # trained
    if not changes:
        return {}, measured
    never = sorted(NEVER & changes.keys())
    if never or not config.train.allow_config_change:
        lines = "\n".join(f"  {key}: {_show(a)} -> {_show(b)}" for key, (a, b) in changes.items())
        head = f"output_dir {run_path} holds a run trained with another config ({path}); these keys differ:\n{lines}\n"
        if never:
            raise ConfigError(head + f"{', '.join(never)} cannot change within a run (its checkpoints hold the old "
                              "model's weights), even with train.allow_config_change=true: pick a new output_dir")
        raise ConfigError(head + "Pick a new output_dir to start a fresh run, or set train.allow_config_change=true "
                          f"to continue this run with the changes (recorded in {run_path / 'config_history.jsonl'})")
    return changes, measured


def _show(value) -> str:
    return value if value == ABSENT else json.dumps(value)
