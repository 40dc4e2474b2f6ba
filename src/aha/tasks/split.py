"""A held-out fraction of one data file: a seeded shuffle of its rows, the same on every run and
machine (random.Random's shuffle is fixed by Python), and not the run's seed, so runs with
different seeds hold out the same rows."""

from __future__ import annotations

import random
from collections.abc import Sequence

from aha.errors import TaskError


def held_out_indices(n: int, fraction: float, key: str, seed: int = 0) -> tuple[list[int], list[int]]:
    """(training, held-out) row indices of n rows, round(fraction * n) held out, each list in file
    order; a TaskError naming key when either side would be empty."""
    count = round(fraction * n)
    if count < 1 or count >= n:
        raise TaskError(f"{key}={fraction:g} of {n} rows holds out {count}: it must leave at least one row on each "
                        "side; change the fraction or give a held-out file")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return sorted(order[count:]), sorted(order[:count])


class Rows(Sequence):
    """Some rows of a sequence, by index, read from it when asked (a streamed file stays on disk)."""

    def __init__(self, rows: Sequence, indices: list[int]):
        self.rows, self.indices = rows, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self.rows[j] for j in self.indices[i]]
        return self.rows[self.indices[i]]


def split_rows(rows: Sequence, fraction: float, key: str, seed: int = 0) -> tuple[Sequence, Sequence]:
    """(training rows, held-out rows) of one file's rows."""
    train, held = held_out_indices(len(rows), fraction, key, seed)
    if isinstance(rows, list):
        return [rows[i] for i in train], [rows[i] for i in held]
    return Rows(rows, train), Rows(rows, held)
