"""The user tool of configs/tool_lookup.yaml: a table of 3-digit numbers stored under keys
k000..k999 that no prompt shows, so a question about a key is answered only by calling
lookup. The table is a pure function of its seed (data/tool_lookup/make_data.py writes the
task's questions and answers from the same function)."""

from random import Random

KEYS = 1000


def table(seed: int = 0) -> dict[str, int]:
    rng = Random(f"lookup-table:{seed}")
    return {f"k{i:03d}": rng.randint(100, 999) for i in range(KEYS)}


_TABLE = table()


def lookup(key: str) -> str:
    """Look up the number stored under a key."""
    key = key.strip().strip("'\"").lower()
    if key not in _TABLE:
        return f"no such key: {key[:40]}"
    return str(_TABLE[key])
