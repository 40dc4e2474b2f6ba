"""What a call of aha.train, aha.evaluate or aha.load_config is given, as the raw mapping a YAML
file and the CLI's overrides make: a file, a Config (the values it was given, never its defaults
nor what its checks derived from them), a dict or nothing, and the keyword settings over it."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePath

from pydantic import BaseModel

from aha.config import Config, ConfigError, read_config_file


def config_mapping(config, caller: str) -> tuple[dict, str]:
    """(the raw config mapping, where it came from: for errors). caller: 'aha.train', ..."""
    if config is None:
        return {}, f"{caller}'s arguments"
    if isinstance(config, Config):
        return given(config), "the Config given"
    if isinstance(config, dict):
        return json.loads(json.dumps(plain(config))), "the dict given"
    return read_config_file(Path(config)), str(config)


def given(model: BaseModel, dumped: dict | None = None) -> dict:
    """The values model was given (in a file, an override, a keyword, or assigned later), section by
    section, as JSON values: not the defaults, nor what its checks derived (a built-in task's reward,
    eval.greedy switched off), so settings applied over them derive those anew as from a file."""
    dumped = model.model_dump(mode="json") if dumped is None else dumped
    out = {}
    for name, field in type(model).model_fields.items():
        value, was_set = getattr(model, name), name in model.model_fields_set
        if isinstance(value, BaseModel):  # a section: what was set in it (or the whole default changed)
            if was_set or value != field.get_default(call_default_factory=True):
                out[name] = given(value, dumped[name])
        elif was_set and isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            out[name] = [given(item, data) for item, data in zip(value, dumped[name])]  # reward, task.mixture
        elif was_set:
            out[name] = dumped[name]
    return out


def plain(value):
    """value with paths (pathlib's) as strings, in dicts, lists and tuples too."""
    if isinstance(value, PurePath):
        return os.fspath(value)
    if isinstance(value, dict):
        return {key: plain(inner) for key, inner in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(inner) for inner in value]
    return value


def apply_settings(raw: dict, settings: dict) -> list[str]:
    """Apply keyword settings (train__steps=3, or train={"steps": 3}) to raw; returns them as the
    CLI's dotted overrides, so an error names the setting at fault."""
    names = []
    for name, value in settings.items():
        dotted, value = name.replace("__", "."), plain(value)
        names.append(f"{dotted}={value!r}")
        _merge(raw, dotted.split("."), value)
    return names


def _merge(raw: dict, parts: list[str], value) -> None:
    """Set raw[a][b]... = value; a dict value is merged into the section there, not put in its place."""
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"setting {'__'.join(parts)}: {'.'.join(parts[: i + 1])} is not a section")
        node = child
    leaf = parts[-1]
    if isinstance(value, dict) and isinstance(node.get(leaf), dict):
        for key, inner in value.items():
            _merge(node[leaf], [key], inner)
    else:
        node[leaf] = value
