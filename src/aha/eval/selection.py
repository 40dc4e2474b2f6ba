"""`aha select`: the prompts of a finished RL run worth training on next, by LIMR's learning
impact measurement (algorithms/selection.py) over the run's groups.jsonl."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from aha.algorithms.selection import learning_impact
from aha.config import ConfigError, load_config
from aha.jsonl import read_jsonl
from aha.tasks import build_task
from aha.tracking.run_dir import GROUPS_FILE


def trajectories(run: Path) -> dict[str, list[float | None]]:
    """Each prompt's accuracy in each whole epoch of the run (None where it was not drawn)."""
    path = Path(run) / GROUPS_FILE
    if not path.is_file():
        raise ConfigError(f"{path} not found: aha select reads the groups.jsonl an RL run writes (method rl)")
    counts: dict[str, dict[int, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for line, row in read_jsonl(path, ConfigError, torn_tail=True):
        problem = _group_problem(row)
        if problem:
            raise ConfigError(f"{path}:{line}: {problem}")
        tally = counts[str(row["id"])][row["epoch"]]
        tally[0] += row["right"]
        tally[1] += row["tried"]
    # the epochs that drew prompts, in order (a filter that set every prompt aside for a while,
    # or rounds sampled ahead, can pass epoch numbers that drew none)
    epochs = sorted({k for by_epoch in counts.values() for k in by_epoch})
    # a last epoch the run stopped inside drew only some prompts: left out, or it would leave
    # every prompt not drawn in it without a score
    drawn = [sum(1 for by_epoch in counts.values() if by_epoch.get(k, [0, 0])[1]) for k in epochs]
    if len(epochs) > 1 and drawn[-1] < drawn[0]:
        epochs.pop()
    return {key: [by_epoch[k][0] / by_epoch[k][1] if by_epoch.get(k, [0, 0])[1] else None for k in epochs]
            for key, by_epoch in counts.items()}


def _group_problem(row) -> str | None:
    """Why a groups.jsonl line is not one an RL run writes ({step, epoch, id, right, tried}), or None."""
    if not isinstance(row, dict):
        return f"expected an object {{step, epoch, id, right, tried}}, got {type(row).__name__}"
    missing = [key for key in ("epoch", "id", "right", "tried") if key not in row]
    if missing:
        return f"missing {', '.join(missing)}"
    counts = {key: row[key] for key in ("epoch", "right", "tried")}
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in counts.values()):
        return f"epoch, right and tried must be whole numbers >= 0, got {counts}"
    if row["right"] > row["tried"]:
        return f"right ({row['right']}) exceeds tried ({row['tried']})"
    if not isinstance(row["id"], (str, int)) or isinstance(row["id"], bool):
        return f"id must be a string or an integer, got {type(row['id']).__name__}"
    return None


def select_prompts(run: Path, out: Path, threshold: float = 0.2) -> dict:
    """Write to `out` (JSONL) the run's training samples whose learning impact is at least
    threshold, each with its score; returns what was selected from what."""
    run = Path(run)
    paths = trajectories(run)
    epochs = max((len(values) for values in paths.values()), default=0)
    if epochs < 2:
        raise ConfigError(f"{run}: the run covered {epochs} epoch(s) of its training prompts; the learning impact "
                          "compares each prompt's accuracy across epochs, so it needs at least 2")
    scores = learning_impact(paths)
    config = load_config(run / "config.yaml")
    chosen = [{**sample, "learning_impact": round(scores[str(sample["id"])], 6)}
              for sample in build_task(config.task, config.base_dir).train
              if scores.get(str(sample["id"]), -float("inf")) >= threshold]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(sample) + "\n" for sample in chosen))
    return {"selected": len(chosen), "scored": len(scores), "drawn": len(paths), "epochs": epochs}
