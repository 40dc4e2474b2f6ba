"""Reading users' data files row by row, whatever they keep them in: JSON lines, a JSON array,
Parquet, CSV / TSV, or a Hugging Face `datasets` folder (`save_to_disk`). Every row comes
with where it is (file:line, or file and row number), so that an error names it."""

from __future__ import annotations

import csv
import datetime
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

from aha.jsonl import read_jsonl
from aha.tasks.errors import TaskError

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
        return [(f"{path}:{line}", row) for line, row in read_jsonl(path, TaskError)]
    except TaskError as err:
        if suffix in (".jsonl", ".json"):
            raise
        raise TaskError(f"{err} (read as JSON lines: aha reads {FORMATS})") from None
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
    """Rows as {header: text}; a line with more or fewer cells than the header is an error
    (csv would silently pad or collect them)."""
    rows = []
    csv.field_size_limit(2**31 - 1)  # csv refuses cells over 128 KiB by default: long-context prompts are longer
    with open(path, newline="", encoding="utf-8-sig") as f:  # Excel's "CSV UTF-8" starts with a BOM
        reader = csv.DictReader(f, delimiter=delimiter, restkey=EXTRA_CELLS)
        try:
            for row in reader:
                where = f"{path}:{reader.line_num}"
                extra = row.pop(EXTRA_CELLS, [])
                if extra or None in row.values():
                    cells = sum(value is not None for value in row.values()) + len(extra)
                    raise TaskError(f"{where}: {cells} cells where the header ({path}:1) has {len(reader.fieldnames)}")
                rows.append((where, row))
        except csv.Error as err:
            raise TaskError(f"{path}:{reader.line_num}: not valid CSV ({err})") from None
        except UnicodeDecodeError as err:
            raise TaskError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    return rows


def _dataset_rows(path: Path, split: str | None) -> list[tuple[str, Any]]:
    try:
        from datasets import Dataset, DatasetDict, load_from_disk
    except ImportError:
        raise TaskError(f"{path}: reading a datasets folder needs datasets (pip install 'aha[data]')") from None
    try:
        data = load_from_disk(str(path))
    except Exception as err:  # not a save_to_disk folder, or a damaged one
        raise TaskError(f"{path}: a folder must be one written by datasets' save_to_disk "
                        f"({type(err).__name__}: {err})") from None
    label = str(path)
    if isinstance(data, DatasetDict):
        if split is None:
            raise TaskError(f"{path}: a datasets folder of several splits ({', '.join(data)}); name one folder of it, "
                            f"e.g. {path / next(iter(data))}")
        if split not in data:
            raise TaskError(f"{path}: no split {split!r} in this datasets folder (splits: {', '.join(data)})")
        data, label = data[split], f"{path}[{split}]"
    if not isinstance(data, Dataset):
        raise TaskError(f"{path}: expected a Dataset or DatasetDict, got {type(data).__name__}")
    return [(f"{label} row {index}", _plain(row)) for index, row in enumerate(data, start=1)]
