"""Choosing training prompts from a run's history: LIMR's learning impact measurement (Li et
al. 2025, *LIMR: Less is More for RL Scaling*, arXiv:2502.11886).

A prompt's trajectory is its accuracy in each epoch of a run. The baseline is the mean
trajectory over prompts (the model's learning curve); a prompt scores
1 - sum_k (a_k - b_k)^2 / sum_k (1 - b_k)^2: 1 when it follows the curve, lower the further
it strays (0 is as far as a prompt solved in every epoch would be from it). Prompts scoring
at least a threshold (LIMR: 0.2) make the next run's data."""

from __future__ import annotations


def fill_trajectory(accuracies: list[float | None]) -> list[float | None]:
    """An epoch in which the prompt was not drawn takes the next epoch's accuracy (as LIMR's
    selection does); one with no later epoch stays None."""
    filled = list(accuracies)
    for k in range(len(filled) - 2, -1, -1):
        if filled[k] is None:
            filled[k] = filled[k + 1]
    return filled


def learning_impact(trajectories: dict[str, list[float | None]]) -> dict[str, float]:
    """Each prompt's score against the mean trajectory, over the prompts whose filled
    trajectory is complete (the others get no score). All trajectories must have the same
    number of epochs."""
    filled = {key: fill_trajectory(values) for key, values in trajectories.items()}
    complete = {key: values for key, values in filled.items() if None not in values}
    if not complete:
        return {}
    lengths = {len(values) for values in complete.values()}
    if len(lengths) != 1:
        raise ValueError(f"trajectories of different lengths: {sorted(lengths)}")
    epochs = lengths.pop()
    baseline = [sum(values[k] for values in complete.values()) / len(complete) for k in range(epochs)]
    room = sum((1 - b) ** 2 for b in baseline)
    scores = {}
    for key, values in complete.items():
        off = sum((a - b) ** 2 for a, b in zip(values, baseline))
        # a baseline at 1 in every epoch leaves no room to stray: every prompt follows it
        scores[key] = 1.0 - off / room if room > 0 else 1.0
    return scores
