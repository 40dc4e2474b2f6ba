"""SQL execution reward: the completion's query and the sample's reference query run on the
sample's SQLite database, and their result sets are compared (Text-to-SQL, as SQL-R1 and
PaVeRL-SQL reward execution results rather than query text).

The database is the task's, shared by every rollout, so a query must never change it, and the
policy writes the query. Three locks, any one of which refuses a write: the file is opened
read-only and immutable (a `mode=ro&immutable=1` URI, so no -wal/-shm/-journal file appears
beside it, even for a WAL database), `PRAGMA query_only` is set, and an authorizer denies every
action but reading (no INSERT/UPDATE/DELETE/DROP/CREATE, no PRAGMA, no ATTACH, so no VACUUM INTO
either, no transactions). A query past `timeout_s` is interrupted by a progress handler (a
recursive CTE that never ends), no value may grow past 1 MB (zeroblob bombs) and no result set
past 64 MB. One SQL function call is not interruptible (ltrim or LIKE over 1 MB strings can run
for minutes): give the reward `workers` and `timeout_s` to bound those too."""

from __future__ import annotations

import functools
import re
import sqlite3
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

from aha.config.paths import resolve_path

# what a query may do: read tables and columns, select, recurse (WITH RECURSIVE), call functions
_ALLOWED = {sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE, sqlite3.SQLITE_FUNCTION}
# functions that touch files or the engine; none is compiled into Python's sqlite3 by default, refused all the same
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
_MAX_VALUE_BYTES = 1_000_000
_MAX_RESULT_BYTES = 64_000_000  # all the values of a result set together
_FENCE = re.compile(r"```[ \t]*sql[^\n]*\n(.*?)(?:```|$)", re.DOTALL | re.IGNORECASE)
_STATEMENT_START = re.compile(r"^[ \t]*(?:select|with)\b", re.IGNORECASE | re.MULTILINE)


class QueryError(Exception):
    """The query could not run to its end: refused, malformed, too slow, too large."""


def extract_query(completion: str) -> str | None:
    """The completion's SQL: the last ```sql fenced block, else the last statement that starts a
    line with SELECT or WITH, up to its ';' or the end of the text. None when there is none."""
    fences = _FENCE.findall(completion)
    if fences:
        return fences[-1].strip().rstrip(";").strip() or None
    starts = list(_STATEMENT_START.finditer(completion))
    if not starts:
        return None
    text = completion[starts[-1].start():]
    return text.split(";", 1)[0].strip() or None


def _authorize(action, arg1, arg2, db_name, trigger):
    if action not in _ALLOWED:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def open_read_only(path: Path) -> sqlite3.Connection:
    """A connection to the database at path that can only read it."""
    if not path.is_file():  # mode=ro never creates a file, but say which one is missing
        raise FileNotFoundError(f"no SQLite database at {path}")
    conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1", uri=True, isolation_level=None)
    conn.execute("PRAGMA query_only = ON")  # before the authorizer, which refuses every PRAGMA after it
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
    conn.set_authorizer(_authorize)
    return conn


def run_query(path: Path, query: str, timeout_s: float, max_rows: int) -> list[tuple]:
    """The rows of one read-only query; QueryError when it cannot run (refused, malformed,
    interrupted at timeout_s, more than max_rows rows)."""
    conn = open_read_only(path)
    deadline = time.monotonic() + timeout_s
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)  # nonzero: interrupt
    try:
        cursor = conn.execute(query)  # one statement only: "SELECT 1; DROP ..." is refused by sqlite3 itself
        if cursor.description is None:  # no result columns: not a query (a REINDEX that had nothing to do)
            raise QueryError("not a query: it returns no result set")
        rows, size = [], 0
        for row in cursor:  # one at a time: the deadline and the size are checked between rows
            rows.append(row)
            size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
            if size > _MAX_RESULT_BYTES:  # 10,000 rows of 1 MB blobs would be 10 GB
                raise QueryError(f"a result set larger than {_MAX_RESULT_BYTES} bytes")
            if time.monotonic() > deadline:  # converting rows to Python is past the progress handler
                raise sqlite3.OperationalError("interrupted")
            if len(rows) > max_rows:
                break
    except (sqlite3.Error, sqlite3.Warning, OverflowError, ValueError, MemoryError) as err:
        timed_out = isinstance(err, sqlite3.OperationalError) and time.monotonic() > deadline
        raise QueryError(f"timed out after {timeout_s:g} s" if timed_out else f"{type(err).__name__}: {err}") from None
    finally:
        conn.close()
    if len(rows) > max_rows:
        raise QueryError(f"more than {max_rows} rows")
    return [tuple(_value(v) for v in row) for row in rows]


def _value(v):
    """A cell as compared: floats to 9 decimals (1.0 == 1, 0.1 + 0.2 == 0.3)."""
    return round(v, 9) if isinstance(v, float) else v


def orders(query: str) -> bool:
    """Whether the query's outermost SELECT has ORDER BY (one inside parentheses, a subquery's,
    does not order the result). String literals and quoted names are skipped."""
    text = re.sub(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"", "''", query)
    depth, outer = 0, []
    for char in text:
        depth += (char == "(") - (char == ")")
        outer.append(char if depth == 0 else " ")
    return re.search(r"\border\s+by\b", "".join(outer), re.IGNORECASE) is not None


def row_f1(candidate: list[tuple], reference: list[tuple]) -> float:
    """Multiset F1 of two result sets: the rows they share (with multiplicity) against both sizes."""
    if not candidate and not reference:
        return 1.0
    shared = sum((Counter(candidate) & Counter(reference)).values())
    return 2 * shared / (len(candidate) + len(reference))


@functools.lru_cache(maxsize=256)
def _reference_rows(path: Path, mtime: float, query: str, timeout_s: float, max_rows: int) -> tuple:
    """The reference's rows, once per database file version (a group's completions share them)."""
    return tuple(run_query(path, query, timeout_s, max_rows))


def database_path(sample: dict, db_field: str, db_dir: str | Path, base_dir: str | Path = ".") -> Path:
    """The sample's database: its db_field, absolute or relative to db_dir; db_dir as given
    (absolute, or existing from where aha runs), else relative to base_dir (the config's folder)."""
    if not sample.get(db_field):
        raise ValueError(f"sql_execution: the sample has no {db_field!r} field naming its SQLite database")
    path = Path(str(sample[db_field])).expanduser()
    path = path if path.is_absolute() else resolve_path(db_dir, base_dir) / path
    if not path.is_file():
        raise FileNotFoundError(f"sql_execution: no SQLite database at {path} (the sample's {db_field!r}, in db_dir)")
    return path


def sql_execution(completion: str, sample: dict, db_field: str = "db", timeout_s: float = 2.0,
                  max_rows: int = 10_000, partial: bool = False, db_dir: str = ".", base_dir: str = ".") -> float:
    """1.0 when the completion's query returns the reference query's result set (sample's
    answer) on the sample's database (sample[db_field]): compared as multisets of rows, or as
    sequences when the reference has an outer ORDER BY; column names are not compared. A query
    that is missing, malformed, refused (any write), too slow or too large scores 0. partial:
    a wrong result scores the multiset F1 of its rows against the reference's (0.5 for the right
    rows in the wrong order). A reference that cannot run is the sample's fault: it raises
    (the sample is scored as failed). db_dir: the folder a relative database path is in, as
    given when it exists from the directory aha runs in, else relative to the config's folder
    (base_dir, which aha gives)."""
    path = database_path(sample, db_field, db_dir, base_dir)
    reference_query = str(sample.get("answer") or "").strip().rstrip(";")
    try:
        reference = list(_reference_rows(path, path.stat().st_mtime, reference_query, timeout_s, max_rows))
    except QueryError as err:
        raise ValueError(f"sql_execution: the reference query of sample {sample.get('id', '?')} fails: {err}") from None
    query = extract_query(completion) if isinstance(completion, str) else None
    if query is None:
        return 0.0
    try:
        rows = run_query(path, query, timeout_s, max_rows)
    except QueryError:
        return 0.0
    ordered = orders(reference_query)
    if (rows == reference) if ordered else (Counter(rows) == Counter(reference)):
        return 1.0
    if not partial:
        return 0.0
    if ordered and Counter(rows) == Counter(reference):
        return 0.5
    return row_f1(rows, reference)
