"""The run report's plots: which series go on which panel, and each panel drawn as a PNG."""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np

from aha.tracking.report import figure_png, pyplot


@dataclass(frozen=True)
class Panel:
    """One plot: the metrics whose names match `keys` (shell patterns: a * matches any text, slashes
    too, so reward/* is every reward/... and eval/*/accuracy each task's accuracy)."""

    title: str
    keys: tuple[str, ...]
    exclude: tuple[str, ...] = ()
    needs: str | None = None  # drawn only when a metric of this name (or pattern) was logged
    needs_none: str | None = None  # drawn only when no metric of this name (or pattern) was logged


    def select(self, names: list[str]) -> list[str]:
        if self.needs is not None and not any(fnmatchcase(n, self.needs) for n in names):
            return []
        if self.needs_none is not None and any(fnmatchcase(n, self.needs_none) for n in names):
            return []
        chosen = [n for p in self.keys for n in names if fnmatchcase(n, p)]
        return [n for n in dict.fromkeys(chosen) if not any(fnmatchcase(n, p) for p in self.exclude)]


TASK_TOTALS = ("reward/*/mean", "reward/*/verifier_mean", "reward/*/correct_frac")  # a task mixture's, per task
PANELS = [
    Panel("Reward (mean and components)", ("reward/mean", "reward/*"),
          ("reward/std", "reward/failed", "reward/failed_frac", "reward/correct_frac", "reward/verifier_mean",
           *TASK_TOTALS)),
    Panel("Held-out accuracy", ("eval/accuracy",), needs_none="eval/*/accuracy"),
    # a task mixture (task.mixture): each task's curve beside the overall one
    Panel("Held-out accuracy (overall and per task)", ("eval/accuracy", "eval/*/accuracy"), needs="eval/*/accuracy"),
    Panel("Reward per task (shaped mean)", ("reward/*/mean",)),
    Panel("Training samples at or above the correct threshold, per task", ("reward/*/correct_frac",)),
    Panel("Task mixture weights", ("mixture/*/weight",)),
    Panel("Training samples at or above the correct threshold", ("reward/correct_frac",)),
    Panel("Reward failures (share of samples scored 0 because the reward failed)", ("reward/failed_frac",)),
    Panel("Steps with nothing to train on", ("train/nothing_to_train",)),
    Panel("Hacking monitor: trained vs gold reward", ("reward/verifier_mean", "monitor/gold_mean", "monitor/gold/*",
                                                      "monitor/gap"),
          needs="monitor/gold_mean"),
    # the KL the KL penalty or loss holds down, and the sampling policy's drift from the trained one:
    # different quantities of different sizes (kl/old is ~1e-9 on-policy), on panels of their own
    Panel("KL to the reference model", ("kl/ref",)),
    Panel("KL from the sampling policy to the trained one (off-policy drift within a step)", ("kl/old",)),
    Panel("KL (other estimates)", ("kl/*",), ("kl/ref", "kl/old")),
    Panel("Entropy", ("entropy",)),
    Panel("Clip fraction", ("policy/clip_frac", "value/clip_frac")),
    Panel("Completion length (tokens)", ("length/mean",)),
    Panel("Held-out greedy completion length (tokens)", ("eval/length",)),
    Panel("Truncated fraction", ("length/truncated_frac",)),
    Panel("Length penalty coefficient", ("length/penalty_coef",)),
    Panel("Repetition (repeated 4-grams)", ("monitor/repetition",)),
    Panel("Groups with zero reward variance", ("groups/zero_variance_frac",)),
    Panel("Loss", ("loss/*",), ("loss/total_first_step",)),
    Panel("Supervised loss (NLL per response token)", ("sft/loss",)),
    Panel("Expert iteration: share of samples kept, of prompts solved", ("rft/kept_frac", "rft/prompts_solved_frac")),
    Panel("Gradient norm", ("grad_norm", "value/grad_norm")),
    Panel("Seconds per step", ("time/*",)),
]
LABELS = {"eval/accuracy": "held-out greedy accuracy", "reward/verifier_mean": "trained reward (unshaped)",
          "monitor/gold_mean": "gold reward", "monitor/gap": "gain of trained - gain of gold",
          "reward/failed_frac": "share of samples whose reward failed", "train/nothing_to_train": "1: every advantage "
                  "zero"}


def labels(config: dict) -> dict[str, str]:
    """What each plotted metric is. reward/correct_frac is not accuracy: it is the share of the
    step's samples whose unshaped reward total reached algorithm.length_correct_min."""
    threshold = (config.get("algorithm") or {}).get("length_correct_min", 1.0)
    return {**LABELS, "reward/correct_frac": f"share of training samples with reward total >= {threshold:g}"}
# the table at the top: first and last logged value of each
def series(records: list[dict]) -> dict[str, tuple[list[int], list[float]]]:
    """metric name -> (steps, values), numbers only, in logged order."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    for record in records:
        step = record.get("step")
        for name, value in record.items():
            if name != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) and step is not None:
                steps, values = out.setdefault(name, ([], []))
                steps.append(step)
                values.append(float(value))
    return out


def trailing_mean(values: list[float], window: int) -> np.ndarray:
    """Mean of each value and the window - 1 before it (len(values) - window + 1 of them)."""
    return np.convolve(values, np.ones(window) / window, mode="valid")


def same_lines(names: list[str], data: dict) -> list[list[str]]:
    """The names grouped by identical series (steps and values), in order: reward/mean and its only
    component are one line, which a second line drawn on top would hide."""
    groups: dict[tuple, list[str]] = {}
    for name in names:
        steps, values = data[name]
        same = tuple("nan" if value != value else value for value in values)  # NaN equals no NaN
        groups.setdefault((tuple(steps), same), []).append(name)
    return list(groups.values())


def line_label(names: list[str], label_of: dict[str, str]) -> str:
    return " = ".join(f"{name} ({label_of[name]})" if name in label_of else name for name in names)


def panel_png(panel: Panel, names: list[str], data: dict, flags: dict, label_of: dict[str, str] = LABELS) -> bytes:
    fig, ax = pyplot().subplots(figsize=(6, 3.4), dpi=100)
    for group in same_lines(names, data):
        steps, values = data[group[0]]
        few = len(steps) < 12  # a held-out eval logged at a few steps: show the points
        label = line_label(group, label_of)
        window = len(steps) // 20
        if window < 3:
            ax.plot(steps, values, marker="o" if few else None, markersize=4, linewidth=1.2, label=label)
            continue
        # a long run's per-step values are noisy: faint, under their trailing moving average
        (line,) = ax.plot(steps, values, linewidth=0.8, alpha=0.3)
        ax.plot(steps[window - 1:], trailing_mean(values, window), color=line.get_color(), linewidth=1.5,
                label=f"{label}, mean of {window}")
    for kind, flag in flags.items():
        ax.axvline(flag["step"], color="#b00020", linestyle="--", linewidth=1)
        ax.annotate(kind, (flag["step"], 1), xycoords=("data", "axes fraction"), rotation=90, va="top", ha="right",
                    fontsize=7, color="#b00020")
    ax.set_xlabel("step")
    ax.set_title(panel.title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return figure_png(fig)
