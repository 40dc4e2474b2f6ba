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
    epochs = 0
    for _, row in read_jsonl(path, ConfigError, torn_tail=True):
        tally = counts[row["id"]][row["epoch"]]
        tally[0] += row["right"]
        tally[1] += row["tried"]
        epochs = max(epochs, row["epoch"] + 1)
    # a last epoch the run stopped inside drew only some prompts: left out, or it would leave
    # every prompt not drawn in it without a score
    drawn = [sum(1 for by_epoch in counts.values() if by_epoch.get(k, [0, 0])[1]) for k in range(epochs)]
    if epochs > 1 and drawn[-1] < drawn[0]:
        epochs -= 1
    return {key: [by_epoch[k][0] / by_epoch[k][1] if by_epoch[k][1] else None for k in range(epochs)]
            for key, by_epoch in counts.items()}


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
