"""Writes the lookup task of configs/tool_lookup.yaml: questions about keys of the table in
configs/tools/lookup.py, which no prompt shows (so only a call to the lookup tool answers them).

    .venv/bin/python data/tool_lookup/make_data.py      # -> data/tool_lookup/{train,eval}.jsonl

Train and held-out questions ask about disjoint keys."""

import importlib.util
import json
from pathlib import Path
from random import Random

HERE = Path(__file__).parent
TOOL = HERE.parent.parent / "configs" / "tools" / "lookup.py"
TEMPLATE = "What number is stored under the key {key}?"


def load_table() -> dict[str, int]:
    spec = importlib.util.spec_from_file_location("lookup_tool", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.table()


def write(out: Path = HERE, train: int = 400, held_out: int = 100, seed: int = 0) -> None:
    table = load_table()
    keys = sorted(table)
    Random(f"lookup-split:{seed}").shuffle(keys)
    for name, chosen in (("train", keys[:train]), ("eval", keys[train:train + held_out])):
        rows = [{"id": key, "prompt": TEMPLATE.format(key=key), "answer": str(table[key])} for key in chosen]
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    write()
