"""Reading users' data files row by row, whatever they keep them in: JSON lines, a JSON array,
Parquet, CSV / TSV, or a Hugging Face `datasets` folder (`save_to_disk`). Every row comes
with where it is (file:line, or file and row number), so that an error names it."""

from __future__ import annotations

import csv
import datetime
import json
from decimal import Decimal
from pathlib import Path
from collections.abc import Iterator
from typing import Any

from aha.errors import TaskError

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
        return _csv_rows(path, "\t" if suffix == ".tsv" else ",")
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


def _csv_rows(path: Path, delimiter: str) -> list[tuple[str, Any]]:
    return [(where, row) for where, row, _ in _csv_records(path, delimiter)]


class _Lines:
    """A binary file's lines as text, for csv, knowing the byte offset of the next one (a
    record may span lines: its offset is that of its first). A line ends at \n, \r\n or a
    lone \r (old Mac exports), as text mode's universal newlines would end it."""

    CHUNK = 1 << 16

    def __init__(self, f, offset: int):
        self.f, self.next_offset = f, offset
        self.buffer, self.at_end = b"", False

    def __iter__(self):
        return self

    def _line_end(self) -> int | None:
        cuts = [i for i in (self.buffer.find(b"\n"), self.buffer.find(b"\r")) if i >= 0]
        if not cuts:
            return None
        i = min(cuts)
        if self.buffer[i:i + 1] == b"\r":
            if i + 1 == len(self.buffer) and not self.at_end:
                return None  # a \r\n may be split across reads
            if self.buffer[i + 1:i + 2] == b"\n":
                return i + 2
        return i + 1

    def __next__(self) -> str:
        end = self._line_end()
        while end is None and not self.at_end:
            chunk = self.f.read(self.CHUNK)
            self.at_end = not chunk
            self.buffer += chunk
            end = self._line_end()
        if end is None:
            end = len(self.buffer)
        if end == 0:
            raise StopIteration
        line, self.buffer = self.buffer[:end], self.buffer[end:]
        self.next_offset += len(line)
        return line.decode("utf-8")


def _csv_records(path: Path, delimiter: str, start: tuple[int, int] | None = None,
                 header: list[str] | None = None) -> Iterator[tuple[str, dict, tuple[int, int]]]:
    """(where, {header: text}, (byte offset, line)) for each record; from `start` (a record's
    offset and line, with the header read before) when given. A line with more or fewer cells
    than the header is an error (csv would silently pad or collect them)."""
    csv.field_size_limit(2**31 - 1)  # csv refuses cells over 128 KiB by default: long-context prompts are longer
    with open(path, "rb") as f:
        offset = 3 if start is None and f.read(3) == b"\xef\xbb\xbf" else 0  # Excel's "CSV UTF-8" starts with a BOM
        f.seek(start[0] if start is not None else offset)
        lines = _Lines(f, start[0] if start is not None else offset)
        reader = csv.reader(lines, delimiter=delimiter)
        first_line = start[1] if start is not None else 1
        try:
            if header is None:
                header = next(reader, None)
                if header is None:
                    return
            while True:
                at, line = lines.next_offset, first_line + reader.line_num
                cells = next(reader, None)
                if cells is None:
                    return
                if not cells:  # a blank line
                    continue
                where = f"{path}:{line}"
                if len(cells) != len(header):
                    raise TaskError(f"{where}: {len(cells)} cells where the header ({path}:1) has {len(header)}")
                yield where, dict(zip(header, cells)), (at, line)
        except csv.Error as err:
            raise TaskError(f"{path}:{first_line + reader.line_num - 1}: not valid CSV ({err})") from None
        except UnicodeDecodeError as err:
            raise TaskError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None


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
                raise TaskError(f"{path}:{number}: not UTF-8 text ({err.reason} at byte {offset + err.start})") from None
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
            self.header = _csv_header(self.path, self.delimiter)
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
            yield from _csv_records(self.path, self.delimiter)
        else:
            yield from _jsonl_rows(self.path)

    def fetch(self, position) -> tuple[str, Any]:
        if self.kind == "dataset":
            return f"{self.label} row {position + 1}", _plain(self.dataset[int(position)])
        if self.kind == "csv":
            where, row, _ = next(_csv_records(self.path, self.delimiter, tuple(position), self.header))
        else:
            where, row, _ = next(_jsonl_rows(self.path, tuple(position)))
        return where, row


def _csv_header(path: Path, delimiter: str) -> list[str]:
    with open(path, "rb") as f:
        if f.read(3) != b"\xef\xbb\xbf":
            f.seek(0)
        try:
            return next(csv.reader(_Lines(f, f.tell()), delimiter=delimiter), [])
        except (csv.Error, UnicodeDecodeError) as err:
            raise TaskError(f"{path}:1: not a readable CSV header ({err})") from None


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
