"""The config reference (docs/config.md), written from the schema itself: every key, its
type, default and description. `python -m aha.config.reference > docs/config.md` writes
it; a test fails when the file is not what the schema says."""

from __future__ import annotations

import json
import typing

from pydantic import BaseModel

from aha.config import Config, RewardSpec, sections
from aha.config.mixture import SHARED_KEYS, MixtureTask, WeightsAt
from aha.config.sections import OnlineRMConfig, TaskConfig

HEADER = """# Config reference

Every key of an aha config: its type, default and what it does. A config is a YAML file of
these sections (`aha train CONFIG`), and any key can be set on the command line as
`section.key=value` (read as YAML: `train.steps=10`, `rollout.temperatures=[0.6,1.0]`,
`env.name=null`). Unknown keys are refused, with a suggestion when one is close.

Written from the schema (`src/aha/config/`) by `python -m aha.config.reference > docs/config.md`;
`tests/test_config.py` fails when this page and the schema differ.
"""


def _type(annotation) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        kinds = [_type(a) for a in args if a is not type(None)]
        return " or ".join(kinds) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"list of {_type(args[0])}" if args else "list"
    if origin is tuple:
        return "[" + ", ".join(_type(a) for a in args) + "]"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "reward component" if annotation is RewardSpec else annotation.__name__
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field) -> str:
    out = []
    for item in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("min_length", "length >=")):
            value = getattr(item, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
    return f" ({', '.join(out)})" if out else ""


def _default(field) -> str:
    if field.is_required():
        return "(required)"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, list) and value and isinstance(value[0], BaseModel):
        value = [v.model_dump(exclude_defaults=True) for v in value]
    elif isinstance(value, BaseModel):
        return "(section)"
    return f"`{json.dumps(value, default=str)}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(model: type[BaseModel], prefix: str, skip: tuple[str, ...] = ()) -> list[str]:
    rows = ["| key | type | default | what it does |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if name in skip or isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            continue  # a section: its own table
        rows.append(f"| `{prefix}{name}` | {_type(field.annotation)}{_bounds(field)} | {_default(field)} | "
                    f"{_cell(field.description or '')} |")
    return rows


def reference() -> str:
    out = [HEADER, "## Top level", "", *_table(Config, ""), ""]
    for name, model in sections():
        doc = " ".join((model.__doc__ or "").split())
        out += [f"## `{name}`", "", *([doc, ""] if doc else []), *_table(model, f"{name}."), ""]
    out += ["## A reward component (`reward`, `monitor.gold`, `eval.rank_by`)", "",
            " ".join((RewardSpec.__doc__ or "").split()), "", *_table(RewardSpec, ""), ""]
    out += ["### A reward model that learns during RL (a reward component's `online`)", "",
            " ".join((OnlineRMConfig.__doc__ or "").split()), "", *_table(OnlineRMConfig, "online."), ""]
    out += ["## A task of a mixture (`task.mixture`)", "", " ".join((MixtureTask.__doc__ or "").split()), "",
            "Each takes the keys of `task` (a built-in's knobs, or `data`, `eval_data` and their fields) but "
            f"{', '.join(f'`{k}`' for k in SHARED_KEYS)} (set on `task`: the whole mixture shares them) and `stream` "
            "(not with a mixture yet), and these:", "",
            *_table(MixtureTask, "task.mixture[i].", skip=tuple(TaskConfig.model_fields)), "",
            "### A step of `task.weights_schedule`", "", *_table(WeightsAt, "task.weights_schedule[i]."), ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(reference(), end="")
