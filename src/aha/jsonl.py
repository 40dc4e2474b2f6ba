"""Reading JSON-lines files with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: Path, error: type[Exception] = ValueError, torn_tail: bool = False) -> list[tuple[int, Any]]:
    """(line number, value) for each non-blank line. A line that is not JSON raises `error`
    naming file:line, except, with torn_tail, the last line: a process killed mid-write
    leaves it half-written, and it is left out (the caller may rewrite the file)."""
    # lines end at \n only: str.splitlines would also split inside JSON strings holding U+2028,
    # U+0085 and the like, which json.dumps(ensure_ascii=False) writes as they are
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark is not data
    except UnicodeDecodeError as err:
        line = Path(path).read_bytes()[:err.start].count(b"\n") + 1
        raise error(f"{path}:{line}: not UTF-8 text (byte {err.start}: {err.reason})") from None
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines and lines[-1] == "":
        lines.pop()
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as err:
            if torn_tail and number == len(lines):
                break
            raise error(f"{path}:{number}: not valid JSON ({err.msg} at column {err.colno})") from None
    return out
