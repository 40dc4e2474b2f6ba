"""Rows of users' data (tasks/files.py reads them) as aha's samples: {prompt, answer, ...}
with the other fields kept for rewards. A task's fields may be named otherwise in the file
(task.prompt_field, task.answer_field) and its prompt written from the row's fields by a
template (task.prompt_template). A code task may give "tests" (for the code_tests reward)
instead of an answer."""

from __future__ import annotations

import string
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aha.errors import TaskError
from aha.prompts import check_prompt
from aha.tasks.files import StreamedRows, read_rows

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
    rows = [(where, row) for where, row, _ in checked_rows(((w, r, None) for w, r in read_rows(Path(path), split)),
                                                           missing, transform)]
    if not rows:
        raise TaskError(f"{path}: no {row_label} (empty file)")
    return rows


def checked_rows(rows, missing, transform=None):
    """(where, row, position) for each of rows (where, raw row, position), checked and
    transformed as read_prompt_rows says, one at a time."""
    for where, row, position in rows:
        if not isinstance(row, dict):
            raise TaskError(f"{where}: each row must be an object of fields, got {type(row).__name__}")
        absent = missing(row)
        if absent:
            has = ", ".join(map(str, row)) or "nothing"
            raise TaskError(f"{where}: missing field(s) {absent} (the row has: {has})")
        if transform is not None:
            row = transform(row, where)
        problem = check_prompt(row["prompt"], where)
        if problem:
            raise TaskError(problem)
        yield where, row, position


@dataclass(frozen=True)
class Fields:
    """Where a task's prompt and answer are in the user's rows."""

    prompt: str = "prompt"
    answer: str = "answer"
    template: str | None = None  # the prompt written from the row's fields, "{question}\n{choices}"

    def placeholders(self) -> list[str]:
        return [name for _, name, _, _ in string.Formatter().parse(self.template or "") if name is not None]


def load_samples(path: Path, fields: Fields = Fields(), split: str | None = None,
                 stream: bool = False) -> list[dict] | StreamedSamples:
    """The task samples of a data file: each row's prompt (its prompt field, or the template
    filled from its fields) and answer (its answer field, or tests) under aha's names, its
    other fields kept, and an id (file:row unless the row has one). stream: every row is
    checked in one pass, but only where it is (and its id) is kept; a sample is read from disk
    when it is asked for (StreamedSamples)."""
    try:
        names = fields.placeholders()
    except ValueError as err:  # a lone { or }
        raise TaskError(f"task.prompt_template: {err} (write {{{{ and }}}} for literal braces)") from None
    for name in names:
        if not name.isidentifier():
            raise TaskError(f"task.prompt_template: {{{name}}} is not a field name (a placeholder names one field "
                            "of the row, as {question}; write {{ and }} for literal braces)")
    shape = _SampleShape(fields, str(Path(path).parent) + "/")
    if not Path(path).exists():
        raise TaskError(f"task data file not found: {path}")
    source = StreamedRows(Path(path), split) if stream else None
    rows = iter(source) if stream else ((w, r, None) for w, r in read_rows(Path(path), split))
    samples, positions, seen = [], [], {}
    for where, sample, position in checked_rows(rows, shape.missing, shape.as_sample):
        key = str(sample["id"])
        if not key.strip() or key in seen:  # a curriculum, aha select and pass@k caches key samples by id
            other = "is empty" if not key.strip() else \
                f"is also the id of {source.fetch(seen[key])[0] if stream else seen[key]}"
            raise TaskError(f"{where}: id {sample['id']!r} {other}: each sample needs its own id (or none: aha "
                            "then names it by its file and row)")
        # streaming keeps the first row's position, not its text: an error reads it back
        seen[key] = where if not stream else position
        if stream:
            positions.append(position)
        else:
            samples.append(sample)
    if not seen:
        raise TaskError(f"{path}: no samples (empty file)")
    return StreamedSamples(source, positions, shape) if stream else samples


@dataclass(frozen=True)
class _SampleShape:
    """How a row of a task file becomes a sample (load_samples)."""

    fields: Fields
    folder: str  # the data file's folder, left out of default ids

    def as_sample(self, row: dict, where: str) -> dict:
        fields, sample = self.fields, dict(row)
        if fields.template is not None:
            try:
                sample["prompt"] = fields.template.format_map(row)
            # a format spec the value refuses
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as err:
                raise TaskError(f"{where}: task.prompt_template could not be filled from this row "
                                f"({type(err).__name__}: {err})") from None
        elif fields.prompt in row:
            sample["prompt"] = row[fields.prompt]
        if isinstance(sample.get("prompt"), list):  # Arrow gives every message every key any message has, unset as None
            sample["prompt"] = [{k: v for k, v in m.items() if v is not None} if isinstance(m, dict) else m
                                for m in sample["prompt"]]
        if fields.answer in row:
            sample["answer"] = row[fields.answer]
        # where without the folder: "train.jsonl:12", "train.parquet row 12", "ds[test] row 12"
        sample.setdefault("id", where.removeprefix(self.folder))
        return sample

    def missing(self, row: dict) -> str | None:
        fields = self.fields
        wanted = fields.placeholders() if fields.template is not None else [fields.prompt]
        absent = [name for name in wanted if name not in row]
        if fields.answer not in row and ANSWER_OR not in row:
            absent.append(f"{fields.answer} (or {ANSWER_OR}, for a code task)")
        return ", ".join(absent) or None


class StreamedSamples(Sequence):
    """A task's samples left on disk (task.stream): a list-like view that reads sample i from
    the file when it is asked for. Only where each row is (a byte offset and line, or an Arrow
    row index) stays in memory."""

    def __init__(self, source: StreamedRows, positions: list, shape: _SampleShape):
        self.source, self.shape = source, shape
        if positions and isinstance(positions[0], tuple):  # byte offset and line of each row, as two int64 arrays
            self.offsets, self.lines = array("q", (p[0] for p in positions)), array("q", (p[1] for p in positions))
        else:
            self.offsets, self.lines = array("q", positions), None

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        position = self.offsets[index] if self.lines is None else (self.offsets[index], self.lines[index])
        where, row = self.source.fetch(position)
        return self.shape.as_sample(row, where)
