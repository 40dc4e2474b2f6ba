"""Rows of users' data (tasks/files.py reads them) as aha's samples: {prompt, answer, ...}
with the other fields kept for rewards. A task's fields may be named otherwise in the file
(task.prompt_field, task.answer_field) and its prompt written from the row's fields by a
template (task.prompt_template). A code task may give "tests" (for the code_tests reward)
instead of an answer."""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

from aha.tasks.errors import TaskError
from aha.tasks.files import read_rows
from aha.tasks.prompts import check_prompt

ANSWER_OR = "tests"  # a code task's reference is its tests


def read_prompt_rows(path: Path, missing, file_label: str, row_label: str, split: str | None = None,
                     transform=None) -> list[tuple[str, dict]]:
    """(where, row) for each row of a data file (any format tasks/files.py reads) of rows
    that hold a prompt: the file must exist and hold rows, each an object whose fields
    `missing(row)` finds complete (it returns what is absent, as text, or None) and whose
    prompt, once `transform(row, where)` has put it under "prompt", is a prompt. Each problem is a
    TaskError naming the file and row. Task files and training data (sft, pairs) share it."""
    if not Path(path).exists():
        raise TaskError(f"{file_label} file not found: {path}")
    rows = []
    for where, row in read_rows(Path(path), split):
        if not isinstance(row, dict):
            raise TaskError(f"{where}: each row must be an object of fields, got {type(row).__name__}")
        absent = missing(row)
        if absent:
            raise TaskError(f"{where}: missing field(s) {absent} (the row has: {', '.join(map(str, row)) or 'nothing'})")
        if transform is not None:
            row = transform(row, where)
        problem = check_prompt(row["prompt"], where)
        if problem:
            raise TaskError(problem)
        rows.append((where, row))
    if not rows:
        raise TaskError(f"{path}: no {row_label} (empty file)")
    return rows


@dataclass(frozen=True)
class Fields:
    """Where a task's prompt and answer are in the user's rows."""

    prompt: str = "prompt"
    answer: str = "answer"
    template: str | None = None  # the prompt written from the row's fields, "{question}\n{choices}"

    def placeholders(self) -> list[str]:
        return [name for _, name, _, _ in string.Formatter().parse(self.template or "") if name is not None]


def load_samples(path: Path, fields: Fields = Fields(), split: str | None = None) -> list[dict]:
    """The task samples of a data file: each row's prompt (its prompt field, or the template
    filled from its fields) and answer (its answer field, or tests) under aha's names, its
    other fields kept, and an id (file:row unless the row has one)."""
    try:
        names = fields.placeholders()
    except ValueError as err:  # a lone { or }
        raise TaskError(f"task.prompt_template: {err} (write {{{{ and }}}} for literal braces)") from None
    for name in names:
        if not name.isidentifier():
            raise TaskError(f"task.prompt_template: {{{name}}} is not a field name (a placeholder names one field "
                            "of the row, as {question}; write {{ and }} for literal braces)")

    def as_sample(row: dict, where: str) -> dict:
        sample = dict(row)
        if fields.template is not None:
            try:
                sample["prompt"] = fields.template.format_map(row)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:  # a format spec the value refuses
                raise TaskError(f"{where}: task.prompt_template could not be filled from this row "
                                f"({type(err).__name__}: {err})") from None
        elif fields.prompt in row:
            sample["prompt"] = row[fields.prompt]
        if isinstance(sample.get("prompt"), list):  # Arrow gives every message every key any message has, unset as None
            sample["prompt"] = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m
                                for m in sample["prompt"]]
        if fields.answer in row:
            sample["answer"] = row[fields.answer]
        return sample

    def missing(row: dict) -> str | None:
        wanted = fields.placeholders() if fields.template is not None else [fields.prompt]
        absent = [name for name in wanted if name not in row]
        if fields.answer not in row and ANSWER_OR not in row:
            absent.append(f"{fields.answer} (or {ANSWER_OR}, for a code task)")
        return ", ".join(absent) or None

    samples, seen = [], {}
    folder = str(Path(path).parent) + "/"
    for where, sample in read_prompt_rows(path, missing, "task data", "samples", split, transform=as_sample):
        # where without the folder: "train.jsonl:12", "train.parquet row 12", "ds[test] row 12"
        sample.setdefault("id", where.removeprefix(folder))
        key = str(sample["id"])
        if not key.strip() or key in seen:  # a curriculum, aha select and pass@k caches key samples by id
            raise TaskError(f"{where}: id {sample['id']!r} " + ("is empty" if not key.strip() else
                            f"is also the id of {seen[key]}") + ": each sample needs its own id (or none: aha "
                            "then names it by its file and row)")
        seen[key] = where
        samples.append(sample)
    return samples
