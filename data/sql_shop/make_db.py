"""Writes the Text-to-SQL example of configs/sql_shop.yaml: a small SQLite database (shop.db)
and questions whose answers are SQL queries on it, scored by `fn: sql_execution`.

    .venv/bin/python data/sql_shop/make_db.py     # -> data/sql_shop/{shop.db,train.jsonl,eval.jsonl}

Everything is a pure function of the seed; the database is written to a new file and renamed,
so a reader never sees half of it."""

import json
import os
import sqlite3
from pathlib import Path
from random import Random

HERE = Path(__file__).parent
CITIES = ["Lyon", "Oslo", "Porto", "Turin", "Ghent", "Graz"]
ITEMS = ["pen", "lamp", "desk", "chair", "mug", "book"]
SCHEMA = ("customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT); "
          "orders(id INTEGER PRIMARY KEY, customer_id INTEGER, item TEXT, price REAL, qty INTEGER)")
QUESTIONS = [  # (question, reference query), one per city or item
    ("How many customers live in {city}?", "SELECT COUNT(*) FROM customers WHERE city = '{city}'"),
    ("List the names of the customers in {city}.", "SELECT name FROM customers WHERE city = '{city}'"),
    ("What is the total quantity of {item} ordered?", "SELECT SUM(qty) FROM orders WHERE item = '{item}'"),
    ("List the ids of the orders of {item}, from the most expensive to the cheapest.",
     "SELECT id FROM orders WHERE item = '{item}' ORDER BY price DESC, id"),
    ("What is the highest price paid for a {item}?", "SELECT MAX(price) FROM orders WHERE item = '{item}'"),
    ("Which customers from {city} ordered anything? Give their names.",
     "SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.city = '{city}'"),
]


def write_db(path: Path, seed: int = 0) -> None:
    rng = Random(f"sql-shop:{seed}")
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    conn.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, city TEXT)")
    conn.execute("CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER, item TEXT, price REAL, qty INTEGER)")
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                     [(i, f"customer{i}", rng.choice(CITIES)) for i in range(1, 31)])
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
                     [(i, rng.randint(1, 30), rng.choice(ITEMS), rng.randint(100, 5000) / 100, rng.randint(1, 5))
                      for i in range(1, 121)])
    conn.commit()
    conn.close()
    os.replace(tmp, path)


def samples() -> list[dict]:
    rows = []
    for q, (question, query) in enumerate(QUESTIONS):
        for value in (CITIES if "{city}" in question else ITEMS):
            filled = {"city": value, "item": value}
            rows.append({"id": f"q{q}-{value}", "db": "shop.db", "answer": query.format(**filled),
                         "prompt": f"SQLite tables: {SCHEMA}\nWrite one SQL query, in a ```sql block, that answers: "
                                   f"{question.format(**filled)}"})
    return rows


def write(out: Path = HERE) -> None:
    write_db(out / "shop.db")
    rows = samples()
    held_out = {r["id"] for r in rows if r["id"].endswith(("Graz", "book"))}  # one city and one item held out
    for name, chosen in (("train", [r for r in rows if r["id"] not in held_out]),
                         ("eval", [r for r in rows if r["id"] in held_out])):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chosen))


if __name__ == "__main__":
    write()
