"""Rows handed to aha.train and aha.evaluate (a list of dicts, a datasets.Dataset, a pandas
DataFrame, or a file), as the JSON lines files a config names. The files are planned first and
written once the config is valid (write_files), so a call refused writes nothing."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path, PurePath

from aha.config import METHODS_WITH_DATA, Config, ConfigError
from aha.config.sections import BUILT_IN_TASKS

EXPECTED = ("a list of dicts (one a row, e.g. {'prompt': ..., 'answer': ...}), a datasets.Dataset, a pandas "
            "DataFrame or a file path")


def place_data(raw: dict, method: str, folder: Path, data, eval_data) -> dict[Path, str]:
    """data and eval_data as files in the run folder (data/), named in the method's section or the
    task; returns the files to write (path: text)."""
    section, files = (method if method in METHODS_WITH_DATA else "task"), {}
    fields = Config.model_fields[section].annotation.model_fields
    if eval_data is not None and "eval_data" not in fields:
        raise ConfigError(f"eval_data: method {method} has no held-out data of its own (no {section}.eval_data); its "
                          "held-out evaluation is greedy accuracy on a task's held-out problems: name the task "
                          "(task__name='arithmetic', or files of {prompt, answer} rows as task__data=... and "
                          "task__eval_data=...)")
    target = own_task(raw) if section == "task" and data is not None else raw.setdefault(section, {})
    if data is not None:
        target["data"] = rows_file(data, folder / "data", "train", files)
    if eval_data is not None:
        target["eval_data"] = rows_file(eval_data, folder / "data", "eval", files)
    return files


def own_task(raw: dict) -> dict:
    """raw's task section for rows given in the call: they are the task, so a built-in task's name
    and a mixture are dropped (a name of the user's own stays: it names the task in reports)."""
    task = raw.get("task")
    task = dict(task) if isinstance(task, dict) else {}
    if task.get("name") in BUILT_IN_TASKS:
        del task["name"]
    for key in ("mixture", "weights_schedule", "weights_blend"):
        task.pop(key, None)
    raw["task"] = task
    return task


def rows_file(rows, folder: Path, split: str, files: dict[Path, str]) -> str:
    """The file of rows: a path as it is; rows as JSON lines in folder, named by their content
    (an existing file is never overwritten with other rows), added to files to write."""
    if isinstance(rows, (str, PurePath)):
        return str(Path(rows).resolve())
    text = rows_text(rows, split)
    path = folder / f"{split}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.jsonl"
    files[path] = text
    return str(path.resolve())


def rows_text(rows, split: str) -> str:
    """rows as JSON lines; a row that is no dict, or holds a value JSON cannot, is a ConfigError
    naming it."""
    if hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # a pandas DataFrame (pandas is not imported)
        rows = rows.to_dict("records")
    if isinstance(rows, (Mapping, bytes)) or not hasattr(rows, "__iter__"):
        hint = " (a dict of columns: pass pandas.DataFrame(it) or datasets.Dataset.from_dict(it))" if isinstance(
            rows, Mapping) else ""
        raise ConfigError(f"the {split} data given to aha is of type {type(rows).__name__}: expected {EXPECTED}{hint}")
    lines = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ConfigError(f"the {split} data given to aha: row {i} is a {type(row).__name__} ({row!r:.80}): "
                              f"expected {EXPECTED}")
        try:
            lines.append(json.dumps(dict(row), ensure_ascii=False, default=_json_value) + "\n")
        except (TypeError, ValueError) as err:
            raise ConfigError(f"the {split} data given to aha: row {i}: {err}") from None
    if not lines:
        raise ConfigError(f"the {split} data given to aha is empty")
    return "".join(lines)


def _json_value(value):
    """A value json cannot write as it is: a NumPy number or array, a date or time (ISO 8601)."""
    if hasattr(value, "isoformat"):  # datetime, date, time, pandas.Timestamp
        return value.isoformat()
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # a NumPy scalar
        return value.item()
    if hasattr(value, "tolist"):  # a NumPy array (a list column read by pandas)
        return value.tolist()
    raise TypeError(f"{type(value).__name__} {value!r:.60} is not a JSON value (a string, number, bool, list or "
                    "dict)")


def write_files(files: dict[Path, str]) -> None:
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(text)
