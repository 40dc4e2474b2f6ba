"""Adversarial queries against fn: sql_execution (aha.rewards.sql): each scores 0, leaves the
database's bytes and its folder's listing unchanged, and ends in bounded time."""

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from aha.config import RewardSpec
from aha.rewards import build_reward
from aha.rewards.sql import extract_query, run_query, sql_execution

EMPTY = "SELECT name FROM items WHERE id > 9"  # the reference: no rows, so any row scores 0
A_MB = "printf('%.*c', 990000, 'a')"  # a 1 MB string


def make_db(path: Path, wal: bool = False) -> Path:
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript("CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, price REAL);"
                       "INSERT INTO items VALUES (1, 'pen', 1.5), (2, 'lamp', 2.0);"
                       "CREATE VIRTUAL TABLE notes USING fts5(body); INSERT INTO notes VALUES ('hello');"
                       "CREATE VIRTUAL TABLE boxes USING rtree(id, x0, x1); INSERT INTO boxes VALUES (1, 0, 1);")
    conn.commit()
    conn.close()
    return path


@pytest.fixture(params=[False, True], ids=["rollback", "wal"])
def db(tmp_path, request):
    return make_db(tmp_path / "shop.db", wal=request.param)


def snapshot(path: Path):
    return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(p.name for p in path.parent.iterdir())


ATTACKS = [
    "WITH x AS (SELECT 1) INSERT INTO items SELECT 9, 'x', 0 FROM x",
    "INSERT INTO items VALUES (9, 'x', 0) RETURNING *",
    "DELETE FROM items RETURNING id", "REPLACE INTO items VALUES (1, 'x', 0)",
    "INSERT INTO notes(notes) VALUES ('optimize')", "SAVEPOINT s", "DETACH main",
    "UPDATE items SET price = 0 WHERE id IN (SELECT id FROM items) RETURNING price",
    "ATTACH ':memory:' AS m", "ATTACH 'file:{dir}/x.db?mode=rwc' AS x", "ATTACH DATABASE '{dir}/x.db' AS x",
    "VACUUM main INTO '{dir}/copy.db'", "VACUUM INTO 'file:{dir}/copy.db?mode=rwc'",
    "PRAGMA main.journal_mode = DELETE",
    "SELECT * FROM pragma_journal_mode('wal')", "SELECT * FROM pragma_writable_schema",
    "SELECT * FROM pragma_user_version(7)", "SELECT * FROM pragma_wal_checkpoint('TRUNCATE')",
    "SELECT * FROM pragma_database_list", "SELECT * FROM sqlite_dbpage",
    "SELECT * FROM dbstat", "SELECT * FROM notes WHERE notes MATCH 'hello'", "SELECT * FROM boxes",
    "SELECT writefile('{dir}/w.txt', 'x')", "SELECT readfile('/etc/passwd')", "SELECT fts3_tokenizer('simple')",
    "SELECT load_extension('libc.so.6')", "SELECT 1; DROP TABLE items", "SELECT 1 /* ; */; DELETE FROM items",
    "SELECT 1\x00; DROP TABLE items", "SELECT '\ud800'", "SELECT CAST(x'ff' AS TEXT)", "CREATE TEMP VIEW v AS SELECT 1",
]


@pytest.mark.parametrize("query", ATTACKS)
def test_a_write_escape_or_odd_query_scores_0_and_changes_nothing(db, query):
    before = snapshot(db)
    query = query.format(dir=db.parent)
    for completion in (f"```sql\n{query}\n```", query, f"Here:\n{query};\nDone."):
        assert sql_execution(completion, {"db": str(db), "answer": EMPTY}) == 0.0
    assert snapshot(db) == before  # bytes and folder: no -wal/-shm/-journal, no copy, no attached file


def test_a_wal_database_is_read_without_files_appearing_beside_it(tmp_path):
    db = make_db(tmp_path / "w.db", wal=True)
    before = snapshot(db)
    assert sql_execution("SELECT name FROM items", {"db": str(db), "answer": "SELECT name FROM items"}) == 1.0
    assert snapshot(db) == before


BOMBS = [
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 10000) SELECT zeroblob(990000) FROM r",
    f"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 10000), b(x) AS (SELECT {A_MB}) "
    "SELECT " + ", ".join(["x"] * 100) + " FROM b, r",  # 100 MB a row
    "SELECT randomblob(2000000)", "SELECT length(replace(" + A_MB + ", 'a', " + A_MB + "))",
    f"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 100) SELECT group_concat({A_MB}) FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r",  # rows without end
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 3000) SELECT count(*) FROM r a, r b, r c",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 1000000) "
    "SELECT n FROM r ORDER BY random() DESC, n * 7 % 13",
]


@pytest.mark.parametrize("query", BOMBS, ids=range(len(BOMBS)))
def test_a_huge_or_endless_query_scores_0_in_bounded_time(tmp_path, query):
    db = make_db(tmp_path / "shop.db")
    before = snapshot(db)
    start = time.monotonic()
    assert sql_execution(query, {"db": str(db), "answer": EMPTY}, timeout_s=0.5) == 0.0
    assert time.monotonic() - start < 3.0
    assert snapshot(db) == before


def test_a_result_set_is_bounded_in_bytes_not_only_in_rows(tmp_path):
    db = make_db(tmp_path / "shop.db")
    with pytest.raises(Exception, match="larger than"):
        run_query(db, BOMBS[0], timeout_s=5.0, max_rows=10_000)


SLOW_CALL = f"SELECT length(ltrim({A_MB}, printf('%.*c', 80000, 'b') || 'a'))"  # ~10^11 steps, 2 min


@pytest.mark.xfail(strict=True, reason="one SQL function call is not interruptible by the progress handler; "
                                       "run the reward with workers and timeout_s (next test)")
def test_a_single_slow_function_call_in_process_is_not_stopped_at_the_timeout(tmp_path):
    db = make_db(tmp_path / "shop.db")
    query = "SELECT length(ltrim(printf('%.*c', 100000, 'a'), printf('%.*c', 5000, 'b') || 'a'))"  # ~1 s
    start = time.monotonic()
    sql_execution(query, {"db": str(db), "answer": EMPTY}, timeout_s=0.05)
    assert time.monotonic() - start < 0.3


def test_a_single_slow_function_call_is_killed_in_a_worker_with_a_timeout(tmp_path):
    db = make_db(tmp_path / "shop.db")
    reward = build_reward([RewardSpec(fn="sql_execution", args={"timeout_s": 0.5}, workers=1, timeout_s=2.0)])
    try:
        start = time.monotonic()
        result = reward.score([SLOW_CALL], [{"id": "a", "db": str(db), "answer": EMPTY}])
        assert time.monotonic() - start < 30
        assert result.total.tolist() == [0.0]
    finally:
        reward.close()


def test_a_database_path_outside_or_not_a_database_is_the_samples_fault(tmp_path):
    passwd = Path("/etc/passwd")
    before = passwd.read_bytes()
    with pytest.raises(ValueError, match="reference query of sample"):  # not SQLite: the sample is failed
        sql_execution("SELECT 1", {"id": "s", "db": str(passwd), "answer": "SELECT count(*) FROM sqlite_master"})
    assert passwd.read_bytes() == before
    with pytest.raises(FileNotFoundError):  # a folder is no database
        sql_execution("SELECT 1", {"db": str(tmp_path), "answer": "SELECT 1"})
    # a symlink or ../ is followed: the path is the dataset's, not the policy's, and is only ever read
    db = make_db(tmp_path / "shop.db")
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.db").symlink_to(db)
    before = snapshot(db)
    for name, folder in (("link.db", tmp_path), ("../shop.db", tmp_path / "sub")):
        assert sql_execution("SELECT 1", {"db": name, "answer": "SELECT 1"}, db_dir=str(folder)) == 1.0
    assert snapshot(db) == before


@pytest.mark.parametrize("completion", [None, 42, ["SELECT 1"], b"SELECT 1", {"content": "SELECT 1"}])
def test_a_completion_that_is_not_a_string_scores_0(tmp_path, completion):
    assert sql_execution(completion, {"db": str(make_db(tmp_path / "shop.db")), "answer": "SELECT 1"}) == 0.0


def test_comments_and_semicolons_do_not_smuggle_a_second_statement():
    assert extract_query("SELECT 1; DROP TABLE items") == "SELECT 1"
    # the whole block is kept, and sqlite3 refuses its second statement (ATTACKS above)
    assert extract_query("```sql\nSELECT 1; DROP TABLE items;\n```") == "SELECT 1; DROP TABLE items"
    assert extract_query("```sql\n```\nSELECT 2") is None or extract_query("```sql\n```\nSELECT 2") == "SELECT 2"
