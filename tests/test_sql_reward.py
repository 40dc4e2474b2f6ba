"""fn: sql_execution (aha.rewards.sql): result sets compared as multisets unless the reference
orders, the query taken from a ```sql block or the last SELECT, the database never changed by
anything the policy writes, and a query that never ends stopped at its deadline."""

import hashlib
import json
import sqlite3
import time
from pathlib import Path

import pytest
from tiny_recipes import tiny_overrides

from aha.config import RewardSpec, load_config
from aha.rewards import build_reward
from aha.rewards.sql import extract_query, orders, row_f1, sql_execution
from aha.training.loop import train

REFERENCE = "SELECT name FROM items WHERE price >= 2 ORDER BY price DESC, name"


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, price REAL);"
                       "INSERT INTO items VALUES (1, 'pen', 1.5), (2, 'lamp', 2.0), (3, 'desk', 9.0), (4, 'mug', 2.0);")
    conn.commit()
    conn.close()
    return path


def sample(db, answer="SELECT name FROM items WHERE price >= 2"):
    return {"id": "s1", "db": str(db), "answer": answer}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_an_equivalent_query_scores_1_and_a_wrong_or_malformed_one_0(db):
    s = sample(db)
    assert sql_execution("```sql\nSELECT name FROM items WHERE price > 1.9;\n```", s) == 1.0
    assert sql_execution("SELECT i.name FROM items AS i WHERE NOT i.price < 2 ORDER BY id DESC", s) == 1.0  # any order
    assert sql_execution("```sql\nSELECT name FROM items\n```", s) == 0.0
    assert sql_execution("```sql\nSELEC name FROM items\n```", s) == 0.0
    assert sql_execution("SELECT nme FROM items", s) == 0.0
    assert sql_execution("I do not know.", s) == 0.0
    assert sql_execution("SELECT name, id FROM items WHERE price >= 2", s) == 0.0  # other columns
    # duplicates count: a multiset, not a set
    assert sql_execution("SELECT name FROM items WHERE price >= 2 UNION ALL SELECT 'mug'", s) == 0.0
    # an ordering reference wants its order
    ordered = sample(db, REFERENCE)
    assert sql_execution("SELECT name FROM items WHERE price > 1.9 ORDER BY price DESC, name", ordered) == 1.0
    assert sql_execution("SELECT name FROM items WHERE price > 1.9 ORDER BY price, name", ordered) == 0.0


def test_partial_credit_is_the_multiset_f1_of_rows(db):
    s = sample(db)
    # rows {lamp, desk, mug} against {lamp, desk}: F1 = 2 * 2 / (3 + 2) = 0.8
    assert sql_execution("SELECT name FROM items WHERE price > 1.9 AND name != 'mug'", s, partial=True) == 0.8
    assert sql_execution("SELECT name FROM items WHERE price > 1.9 ORDER BY price, name", sample(db, REFERENCE),
                         partial=True) == 0.5  # right rows, wrong order
    assert sql_execution("SELECT 1 FROM nowhere", s, partial=True) == 0.0
    assert row_f1([], []) == 1.0 and row_f1([(1,), (1,)], [(1,)]) == 2 * 1 / 3


WRITES = [
    "DROP TABLE items", "INSERT INTO items VALUES (5, 'cup', 3.0)", "UPDATE items SET price = 0",
    "DELETE FROM items", "ATTACH 'file:{dir}/other.db?mode=rwc' AS other", "PRAGMA user_version = 7",
    "PRAGMA journal_mode = WAL", "VACUUM INTO '{dir}/copy.db'", "VACUUM", "CREATE TABLE t(x)",
    "CREATE TEMP TABLE t(x)", "SELECT 1; DROP TABLE items", "BEGIN IMMEDIATE", "REINDEX", "ANALYZE",
    "SELECT load_extension('/tmp/evil')", "CREATE VIEW v AS SELECT 1",
]


@pytest.mark.parametrize("query", WRITES)
def test_a_query_that_writes_scores_0_and_leaves_the_database_byte_identical(db, query):
    before, files = digest(db), sorted(p.name for p in db.parent.iterdir())
    query = query.format(dir=db.parent)
    for completion in (f"```sql\n{query}\n```", query):
        assert sql_execution(completion, sample(db, "SELECT name FROM items WHERE id > 9")) == 0.0  # empty reference
    assert digest(db) == before
    assert sorted(p.name for p in db.parent.iterdir()) == files  # no copy, no attached file, no journal left


def test_a_query_that_never_ends_is_stopped_at_the_timeout(db):
    forever = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r"
    start = time.monotonic()
    assert sql_execution(forever, sample(db), timeout_s=0.5) == 0.0
    assert 0.4 < time.monotonic() - start < 3.0
    assert sql_execution("SELECT zeroblob(100000000)", sample(db, "SELECT zeroblob(10)")) == 0.0  # 100 MB: refused


def test_a_broken_sample_fails_with_a_clear_error(db, tmp_path):
    with pytest.raises(ValueError, match="the reference query of sample s1 fails: OperationalError"):
        sql_execution("SELECT 1", sample(db, "SELECT nope FROM items"))
    with pytest.raises(FileNotFoundError, match="no SQLite database at"):
        sql_execution("SELECT 1", sample(tmp_path / "missing.db"))
    assert not (tmp_path / "missing.db").exists()  # never created
    with pytest.raises(ValueError, match="the sample has no 'db' field"):
        sql_execution("SELECT 1", {"id": "s1", "answer": "SELECT 1"})
    reward = build_reward([RewardSpec(fn="sql_execution", args={"db_dir": str(db.parent)})])
    result = reward.score(["SELECT name FROM items WHERE price >= 2"], [{"id": "a", "db": "shop.db",
                                                                        "answer": "SELECT name FROM items "
                                                                                  "WHERE price > 1.9"}])
    assert result.total.tolist() == [1.0]


@pytest.mark.parametrize("workers", [0, 1])
def test_db_dir_is_read_from_the_config_folder_unless_it_exists_from_here(db, tmp_path, monkeypatch, workers):
    recipes, elsewhere = tmp_path / "recipes", tmp_path / "elsewhere"
    (recipes / "dbs").mkdir(parents=True)
    elsewhere.mkdir()
    (recipes / "dbs" / "shop.db").write_bytes(db.read_bytes())
    row = {"id": "a", "db": "shop.db", "answer": "SELECT name FROM items WHERE price > 1.9"}
    spec = RewardSpec(fn="sql_execution", args={"db_dir": "dbs", "timeout_s": 2.0}, workers=workers)

    def score():
        reward = build_reward([spec], base_dir=recipes)
        try:
            return reward.score(["SELECT name FROM items WHERE price >= 2"], [row])
        finally:
            reward.close()  # its worker process too

    monkeypatch.chdir(elsewhere)  # no dbs/ here: read from the config's folder
    assert score().total.tolist() == [1.0]
    (elsewhere / "dbs").mkdir()
    conn = sqlite3.connect(elsewhere / "dbs" / "shop.db")  # dbs/ here wins, and its table has no 'name' column
    conn.executescript("CREATE TABLE items(id INTEGER PRIMARY KEY, price REAL);")
    conn.close()
    assert score().failed.tolist() == [True]  # the reference cannot run there


def test_the_query_is_the_last_sql_block_or_the_last_select():
    assert extract_query("First ```sql\nSELECT 1\n``` then ```sql\nSELECT 2;\n```") == "SELECT 2"
    assert extract_query("Try this:\nSELECT a\nFROM t;\nThat is all.") == "SELECT a\nFROM t"
    assert extract_query("WITH x AS (SELECT 1) SELECT * FROM x") == "WITH x AS (SELECT 1) SELECT * FROM x"
    assert extract_query("no query") is None
    assert orders("SELECT a FROM t ORDER BY a") and not orders("SELECT a FROM (SELECT a FROM t ORDER BY a)")
    assert not orders("SELECT 'order by' FROM t")


def test_the_sql_shop_recipe_runs_on_the_tiny_model(tmp_path, monkeypatch):
    root = Path(__file__).parent.parent
    monkeypatch.chdir(tmp_path)  # the recipe's db_dir, like its data, is read from the config's folder
    before = digest(root / "data/sql_shop/shop.db")
    config = load_config(root / "configs/sql_shop.yaml", tiny_overrides(
        tmp_path / "run", "eval.limit=4", "eval.max_new_tokens=6", "algorithm.dynamic_sampling=false",
        "eval.before=false"))
    train(config, echo=lambda *_: None)
    steps = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps if "time/step_s" in r] == [1, 2]
    assert all(r.get("reward/failed", 0) == 0 for r in steps)  # every reference query runs
    assert digest(root / "data/sql_shop/shop.db") == before
