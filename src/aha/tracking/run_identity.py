"""A run folder knows what it is: a resume compares the new resolved config with the run's
config.yaml and refuses changes to what is trained, unless the user asks to continue with them."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from aha.config import Config, ConfigError, from_dict

# Keys that do not change what is trained: where the run lives, how long it runs (extending
# a run is allowed), bookkeeping, memory-only batch knobs, and when held-out evaluation runs.
# What an evaluation measures (eval.limit, eval.scorer, ...) is not here: the before/after
# accuracies of one run must be measured the same way.
ALLOWED = frozenset({
    "output_dir", "base_dir",
    "train.steps", "train.resume", "train.allow_config_change", "train.checkpoint_every", "train.keep_checkpoints",
    "train.log_samples", "train.report", "train.micro_batch_size", "rollout.batch_size",
    "eval.before", "eval.after", "eval.every", "eval.rank_by",
})
# Keys no flag can change: the checkpoint's weights belong to the old model.
NEVER = frozenset({"model"})


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


def config_changes(old: dict, new: dict) -> dict[str, list]:
    """Dotted key -> [old, new] for every key outside ALLOWED whose value differs."""
    old_flat, new_flat = flatten(old), flatten(new)
    changes = {}
    for key in sorted(old_flat.keys() | new_flat.keys()):
        a, b = old_flat.get(key, ABSENT), new_flat.get(key, ABSENT)
        if key not in ALLOWED and a != b:
            changes[key] = [a, b]
    return changes


def read_run_config(path: Path) -> dict:
    """The resolved config a run wrote, with defaults filled in for keys an older aha did not write."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of config keys")
    try:
        return from_dict(raw, str(path)).model_dump(mode="json")
    except ConfigError:  # written by another version: compare what it says
        return raw


def resume_changes(run_path: Path, config: Config) -> dict[str, list]:
    """The changes a resume into run_path would bring, {} when none. Raises ConfigError when
    there are some and the user did not allow them, or when one of them can never be allowed."""
    path = run_path / "config.yaml"
    if not path.is_file():
        return {}
    changes = config_changes(read_run_config(path), config.model_dump(mode="json"))
    if not changes:
        return {}
    never = sorted(NEVER & changes.keys())
    if never or not config.train.allow_config_change:
        lines = "\n".join(f"  {key}: {_show(a)} -> {_show(b)}" for key, (a, b) in changes.items())
        head = f"output_dir {run_path} holds a run trained with another config ({path}); these keys differ:\n{lines}\n"
        if never:
            raise ConfigError(head + f"{', '.join(never)} cannot change within a run (its checkpoints hold the old "
                              "model's weights), even with train.allow_config_change=true: pick a new output_dir")
        raise ConfigError(head + "Pick a new output_dir to start a fresh run, or set train.allow_config_change=true "
                          f"to continue this run with the changes (recorded in {run_path / 'config_history.jsonl'})")
    return changes


def _show(value) -> str:
    return value if value == ABSENT else json.dumps(value)
