"""The maths of a task mixture (task.mixture): the tasks' weights at a step, from a schedule of
(step, weights) points, and which task a uniform draw picks. tasks/mixture.py draws with them."""

from __future__ import annotations

from bisect import bisect_right

BLENDS = ("step", "linear")


def scheduled_weights(step: int, points: list[tuple[int, list[float]]], blend: str = "step") -> list[float]:
    """The normalised weights in force at `step`. points: (step, weights) by increasing step,
    the first at step 0 (the tasks' own weights unless the schedule sets step 0).
    blend=step: the last point at or before `step` holds until the next one.
    blend=linear: between two points, each weight moves in equal steps from the earlier
    point's to the later's; after the last point, the last weights hold."""
    if blend not in BLENDS:
        raise ValueError(f"blend must be one of {BLENDS}, got {blend!r}")
    at = max(bisect_right([s for s, _ in points], step) - 1, 0)
    weights = points[at][1]
    if blend == "linear" and at + 1 < len(points):
        (s0, w0), (s1, w1) = points[at], points[at + 1]
        share = (step - s0) / (s1 - s0)
        weights = [a + (b - a) * share for a, b in zip(w0, w1)]
    total = sum(weights)
    return [w / total for w in weights]


def pick(weights: list[float], u: float) -> int:
    """The index whose share of [0, 1) holds u (weights normalised): the first i with
    u < w_0 + ... + w_i. A zero weight is never picked; u at the very top picks the last
    positive weight (rounding can leave the cumulative sum a hair under 1)."""
    cumulative = 0.0
    for i, w in enumerate(weights):
        cumulative += w
        if w > 0 and u < cumulative:
            return i
    return max(i for i, w in enumerate(weights) if w > 0)
