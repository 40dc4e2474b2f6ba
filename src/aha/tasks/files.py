"""Reading users' data files row by row, whatever they keep them in: JSON lines, a JSON array,
Parquet, CSV / TSV, or a Hugging Face `datasets` folder (`save_to_disk`). Every row comes
with where it is (file:line, or file and row number), so that an error names it."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from aha.errors import TaskError
from aha.tasks.csv_rows import csv_header, csv_records, csv_rows

EXTRA_CELLS = "\0extra"  # csv's key for cells past the header's (no header can be named so)
FORMATS = ".jsonl, .json, .parquet, .csv, .tsv, or a folder written by datasets' save_to_disk"


def read_rows(path: Path, split: str | None = None) -> list[tuple[str, Any]]:
    """(where, row) for every row of the file at path (see FORMATS). split: which split of a
    DatasetDict folder (one with several splits); ignored elsewhere. Any other suffix is read
    as JSON lines. A file that is missing or unreadable is a TaskError naming it."""
    path = Path(path)
    if path.is_dir():
        return _dataset_rows(path, split)
    if not path.is_file():
        raise TaskError(f"data file not found: {path}")
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _parquet_rows(path)
    if suffix in (".csv", ".tsv"):
        return csv_rows(path, "\t" if suffix == ".tsv" else ",")
    try:
        if suffix == ".json" and path.read_text(encoding="utf-8-sig").lstrip().startswith("["):
            return _json_array_rows(path)
        # .jsonl, a .json that is not one array, and anything else: JSON lines
        return [(where, row) for where, row, _ in _jsonl_rows(path)]
    except UnicodeDecodeError as err:
        raise TaskError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); aha reads {FORMATS}") from None


def _json_array_rows(path: Path) -> list[tuple[str, Any]]:
    try:
        value = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as err:
        raise TaskError(f"{path}:{err.lineno}: not valid JSON ({err.msg} at column {err.colno})") from None
    return [(f"{path} row {index}", row) for index, row in enumerate(value, start=1)]


def _parquet_rows(path: Path) -> list[tuple[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TaskError(f"{path}: reading Parquet needs pyarrow (pip install 'aha[data]')") from None
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as err:  # pyarrow's errors for a damaged or non-Parquet file are many
        raise TaskError(f"{path}: not a readable Parquet file ({type(err).__name__}: {err})") from None
    return [(f"{path} row {index}", _plain(row)) for index, row in enumerate(rows, start=1)]


def _plain(value):
    """A value as JSON holds it (samples are written to JSON files): decimals as floats,
    dates and times as ISO text, bytes as UTF-8 text; dicts and lists through."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _jsonl_rows(path: Path, start: int | None = None) -> Iterator[tuple[str, Any, tuple[int, int]]]:
    """(where, value, (byte offset, line)) for each non-blank line of a JSON-lines file (from
    the line at `start`, a (byte offset, line) pair, when given). Lines end at \n only (not at
    U+2028 and the like inside strings); a byte-order mark is not data. A file whose suffix
    is not .jsonl or .json was read as JSON lines because it is none of the other formats:
    its errors say so."""
    try:
        yield from _jsonl_lines(path, start)
    except TaskError as err:
        if path.suffix.lower() in (".jsonl", ".json"):
            raise
        raise TaskError(f"{err} (read as JSON lines: aha reads {FORMATS})") from None


def _jsonl_lines(path: Path, start: int | None) -> Iterator[tuple[str, Any, tuple[int, int]]]:
    with open(path, "rb") as f:
        offset, number = start if start is not None else (0, 1)
        f.seek(offset)
        for raw in f:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise TaskError(f"{path}:{number}: not UTF-8 text ({err.reason} at byte "
                                f"{offset + err.start})") from None
            if number == 1:
                text = text.removeprefix("\ufeff")
            if text.strip():
                try:
                    yield f"{path}:{number}", json.loads(text), (offset, number)
                except json.JSONDecodeError as err:
                    raise TaskError(f"{path}:{number}: not valid JSON ({err.msg} at column {err.colno})") from None
            offset += len(raw)
            number += 1


def _dataset_rows(path: Path, split: str | None) -> list[tuple[str, Any]]:
    data, label = _dataset(path, split)
    return [(f"{label} row {index}", _plain(row)) for index, row in enumerate(data, start=1)]


def _dataset(path: Path, split: str | None):
    """The Dataset (Arrow, memory-mapped) of a save_to_disk folder, and its label for errors."""
    try:
        from datasets import Dataset, DatasetDict, load_from_disk
    except ImportError:
        raise TaskError(f"{path}: reading a datasets folder needs datasets (pip install 'aha[data]')") from None
    label = str(path)
    if split is not None and (path / "dataset_dict.json").is_file() and (path / split / "state.json").is_file():
        path, label = path / split, f"{path}[{split}]"  # that split alone: the others' state does not matter
    try:
        data = load_from_disk(str(path))
    except Exception as err:  # not a save_to_disk folder, or a damaged one
        # datasets cannot read back an empty dataset it saved
        empty = [folder for folder in [path, *sorted(path.glob("*/"))] if _saved_without_rows(folder)]
        if empty == [path]:
            raise TaskError(f"{label}: the datasets folder holds no rows (an empty split)") from None
        if empty:
            raise TaskError(f"{label}: split {', '.join(f.name for f in empty)} of the datasets folder holds no rows "
                            "(an empty split)") from None
        raise TaskError(f"{path}: a folder must be one written by datasets' save_to_disk "
                        f"({type(err).__name__}: {err})") from None
    if isinstance(data, DatasetDict):
        if split is None:
            raise TaskError(f"{path}: a datasets folder of several splits ({', '.join(data)}); name one folder of it, "
                            f"e.g. {path / next(iter(data))}")
        if split not in data:
            raise TaskError(f"{path}: no split {split!r} in this datasets folder (splits: {', '.join(data)})")
        data, label = data[split], f"{path}[{split}]"
    if not isinstance(data, Dataset):
        raise TaskError(f"{path}: expected a Dataset or DatasetDict, got {type(data).__name__}")
    return data, label


def _saved_without_rows(path: Path) -> bool:
    """Whether save_to_disk wrote this folder from a dataset of no rows: its state.json lists
    no data files."""
    try:
        state = json.loads((path / "state.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and state.get("_data_files") == []


class StreamedRows:
    """The rows of a data file kept on disk (task.stream): one pass over them (__iter__:
    where, row and where to find it again), then fetch(position) reads one row back. JSON
    lines and CSV / TSV are re-read at the row's byte offset; a datasets folder is Arrow
    memory-mapped from disk, and a Parquet file is first converted by `datasets` to such a
    memory-mapped Arrow file in its cache (~/.cache/huggingface/datasets). A .json array is
    one JSON value: it cannot be read a row at a time."""

    def __init__(self, path: Path, split: str | None = None):
        self.path, self.split = Path(path), split
        self.dataset = self.label = None
        suffix = self.path.suffix.lower()
        if self.path.is_dir():
            self.kind = "dataset"
            self.dataset, self.label = _dataset(self.path, split)
        elif not self.path.is_file():
            raise TaskError(f"data file not found: {self.path}")
        elif suffix == ".parquet":
            self.kind = "dataset"
            self.dataset, self.label = _parquet_dataset(self.path), str(self.path)
        elif suffix in (".csv", ".tsv"):
            self.kind, self.delimiter = "csv", "\t" if suffix == ".tsv" else ","
            self.header = csv_header(self.path, self.delimiter)
        elif suffix == ".json" and _starts_with_bracket(self.path):
            raise TaskError(f"{self.path}: a .json array cannot be streamed (task.stream reads a row at a time): "
                            "write it as JSON lines, one object a line")
        else:
            self.kind = "jsonl"

    def __iter__(self) -> Iterator[tuple[str, Any, Any]]:
        if self.kind == "dataset":
            for index in range(len(self.dataset)):
                yield f"{self.label} row {index + 1}", _plain(self.dataset[index]), index
        elif self.kind == "csv":
            yield from csv_records(self.path, self.delimiter)
        else:
            yield from _jsonl_rows(self.path)

    def fetch(self, position) -> tuple[str, Any]:
        if self.kind == "dataset":
            return f"{self.label} row {position + 1}", _plain(self.dataset[int(position)])
        if self.kind == "csv":
            where, row, _ = next(csv_records(self.path, self.delimiter, tuple(position), self.header))
        else:
            where, row, _ = next(_jsonl_rows(self.path, tuple(position)))
        return where, row


def _starts_with_bracket(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(4096).decode("utf-8", errors="replace").removeprefix("\ufeff")
    return head.lstrip().startswith("[")


def _parquet_dataset(path: Path):
    try:
        from datasets import Dataset
    except ImportError:
        raise TaskError(f"{path}: streaming Parquet needs datasets (pip install 'aha[data]')") from None
    try:
        return Dataset.from_parquet(str(path))
    except Exception as err:  # noqa: BLE001 - pyarrow's errors for a damaged file are many
        raise TaskError(f"{path}: not a readable Parquet file ({type(err).__name__}: {err})") from None
