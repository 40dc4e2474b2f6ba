"""CSV / TSV files read record by record, each with where it is (file:line) and its byte
offset, so that a streamed task can read one record back without reading the file again."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aha.errors import TaskError


def csv_rows(path: Path, delimiter: str) -> list[tuple[str, Any]]:
    return [(where, row) for where, row, _ in csv_records(path, delimiter)]


class Lines:
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


def csv_records(path: Path, delimiter: str, start: tuple[int, int] | None = None,
                 header: list[str] | None = None) -> Iterator[tuple[str, dict, tuple[int, int]]]:
    """(where, {header: text}, (byte offset, line)) for each record; from `start` (a record's
    offset and line, with the header read before) when given. A line with more or fewer cells
    than the header is an error (csv would silently pad or collect them)."""
    csv.field_size_limit(2**31 - 1)  # csv refuses cells over 128 KiB by default: long-context prompts are longer
    with open(path, "rb") as f:
        offset = 3 if start is None and f.read(3) == b"\xef\xbb\xbf" else 0  # Excel's "CSV UTF-8" starts with a BOM
        f.seek(start[0] if start is not None else offset)
        lines = Lines(f, start[0] if start is not None else offset)
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


def csv_header(path: Path, delimiter: str) -> list[str]:
    with open(path, "rb") as f:
        if f.read(3) != b"\xef\xbb\xbf":
            f.seek(0)
        try:
            return next(csv.reader(Lines(f, f.tell()), delimiter=delimiter), [])
        except (csv.Error, UnicodeDecodeError) as err:
            raise TaskError(f"{path}:1: not a readable CSV header ({err})") from None
