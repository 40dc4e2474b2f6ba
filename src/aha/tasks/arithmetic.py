"""Procedural arithmetic: every problem in a range, split into disjoint train and held-out sets."""

from __future__ import annotations

import random

from aha.config import TaskConfig
from aha.errors import TaskError

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
COMMUTATIVE = {"+", "*"}


def arithmetic_splits(cfg: TaskConfig) -> tuple[list[dict], list[dict]]:
    """All problems a op b with a in [a_min, a_max], b in [b_min, b_max], shuffled by seed.

    For commutative operators, a*b and b*a are the same problem and always land in the
    same split, so the held-out set never tests a problem seen in training."""
    if cfg.a_min > cfg.a_max or cfg.b_min > cfg.b_max:
        raise TaskError("task: a_min/b_min must not exceed a_max/b_max")
    groups: dict[tuple, list[dict]] = {}
    for op in cfg.operators:
        for a in range(cfg.a_min, cfg.a_max + 1):
            for b in range(cfg.b_min, cfg.b_max + 1):
                key = (op, min(a, b), max(a, b)) if op in COMMUTATIVE else (op, a, b)
                sample = {
                    "id": f"{a}{op}{b}",
                    "prompt": cfg.template.format(a=a, op=op, b=b),
                    "answer": str(OPS[op](a, b)),
                }
                groups.setdefault(key, []).append(sample)
    keys = sorted(groups)
    random.Random(cfg.seed).shuffle(keys)
    held_out: list[dict] = []
    train: list[dict] = []
    for key in keys:
        (held_out if len(held_out) < cfg.num_eval else train).extend(groups[key])
    if not train:
        total = sum(len(g) for g in groups.values())
        raise TaskError(
            f"task: the range holds {total} problems, all taken by task.num_eval={cfg.num_eval}; "
            "widen a_min..a_max / b_min..b_max or lower num_eval"
        )
    return train, held_out
