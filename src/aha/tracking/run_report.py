"""`aha report RUN`: a training run's report.html, built from the run folder alone.

Plots of every logged series over steps (reward and its components, held-out accuracy,
the hacking monitor, KL, entropy, clip fraction, length, loss, gradient norm, time), the
monitor's flags drawn where their condition began, the warnings (with the training
diagnosis's flags, from diagnosis.json), a few logged samples, and the eval
reports (`aha eval --samples --out RUN/eval`) of the run if there are any. The training
loop writes it when a run ends; the command rebuilds it at any time, also mid-run.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

from aha.jsonl import read_jsonl
from aha.prompts import prompt_text
from aha.rewards.compose import reward_formula
from aha.tracking.plots import PANELS, labels, panel_png, series
from aha.tracking.report import eval_sections, img, page, pct


class RunReportError(ValueError):
    """The folder is not a run, or one of its files cannot be read."""


HEADLINE = ["eval/accuracy", "reward/mean", "reward/correct_frac", "monitor/gold_mean", "kl/ref", "kl/old", "entropy",
            "policy/clip_frac", "length/mean", "length/truncated_frac", "time/step_s"]


def read_records(path: Path) -> list[dict]:
    """A run file's records; a torn last line (the run is being written, or was killed
    mid-write) is left out. Each must be a record as a run writes it: an object whose step
    is a whole number and whose reward, if any, a number."""
    if not path.is_file():
        return []
    records = read_jsonl(path, RunReportError, torn_tail=True)
    for line, record in records:
        if not isinstance(record, dict):
            raise RunReportError(f"{path}:{line}: expected an object as a run writes, got {type(record).__name__}")
        step = record.get("step")
        if isinstance(step, bool) or not isinstance(step, int):
            raise RunReportError(f"{path}:{line}: step must be a whole number, got {step!r}")
        reward = record.get("reward", 0.0)
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            raise RunReportError(f"{path}:{line}: reward must be a number, got {reward!r}")
    return [record for _, record in records]


def _read_file(path: Path, parse, what: str, errors: tuple = (ValueError,)):
    """A file of the run folder parsed (YAML or JSON), its faults named with its path."""
    try:
        return parse(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, *errors) as err:
        raise RunReportError(f"{path}: not {what} ({type(err).__name__}: {' '.join(str(err).split())[:200]})") from None


def _config_summary(config: dict) -> str:
    reward = config.get("reward") or []
    task = config.get("task") or {}
    files = (f" (train {task['data']}" + (f", held-out {task['eval_data']})" if task.get("eval_data") else ")")
             if task.get("data") else "")
    task_name = task.get("name") or Path(str(task.get("eval_data") or task.get("data"))).stem
    if task.get("mixture"):  # a task mixture: its tasks, as the run named them
        task_name = "+".join(str(e.get("label") or e.get("name") or Path(str(e.get("data"))).stem)
                             for e in task["mixture"])
    parts = [f"model {config.get('model')}", f"task {task_name}{files}",
             f"advantage {(config.get('algorithm') or {}).get('advantage')}",
             "reward " + reward_formula([(r.get("name") or str(r.get("fn") or "reward_model"),
                                          float(r.get("weight", 1)), r.get("combine", "sum"),
                                         float(r.get("gate_min", 1.0))) for r in reward])]
    return ", ".join(parts)


def _headline_table(data: dict) -> str:
    rows = []
    for name in HEADLINE:
        if name in data:
            steps, values = data[name]
            rows.append(f"<tr><td>{name}</td><td>{values[0]:.4g} <small>(step {steps[0]})</small></td>"
                        f"<td>{values[-1]:.4g} <small>(step {steps[-1]})</small></td></tr>")
    return "<table><tr><th>metric</th><th>first</th><th>last</th></tr>" + "".join(rows) + "</table>" if rows else ""


FAILURE_PREFIX = "reward_failed/"  # per-component failure counts in a step's record


def failure_counts(record: dict) -> dict[str, int]:
    """{component: samples it failed on} of one step's record."""
    return {k[len(FAILURE_PREFIX):]: int(v) for k, v in record.items() if k.startswith(FAILURE_PREFIX) and v}


def _diagnosis_items(run: Path) -> list[str]:
    """The training diagnosis's flags (diagnosis.json, training/diagnosis.py): each with the step
    it began, what it means and what users usually change."""
    path = run / "diagnosis.json"
    found = _read_file(path, json.loads, "JSON") if path.is_file() else {}
    flags = found.get("flags", {}) if isinstance(found, dict) else None
    keys = {"step", "detail", "meaning", "advice"}
    if not isinstance(flags, dict) or not all(isinstance(f, dict) and keys <= set(f) for f in flags.values()):
        raise RunReportError(f"{path}: not the mapping a run writes")
    e = html.escape
    return [f"<li><b>{e(name)}</b> from step {e(str(f['step']))} ({e(str(f['detail']))}): {e(str(f['meaning']))}. "
            f"Usually: {e(str(f['advice']))}</li>" for name, f in flags.items()]


def _alarms_section(metrics: list[dict], diagnosis: list[str] = ()) -> str:
    """The run's silent failures, said at the top: steps whose reward failed on some samples,
    steps that trained nothing, optimizer steps dropped for a non-finite loss or gradient, and
    the diagnosis's flags."""
    steps = [r for r in metrics if "reward/mean" in r]
    items = []
    order = [r["step"] for r in steps]
    if any(b <= a for a, b in zip(order, order[1:])):
        twice = len(order) - len(set(order))
        items.append(f"<li><b>metrics.jsonl is not one run</b>: its steps go back (and {twice} are logged more than "
                     "once), as when two processes wrote into one folder; the plots below mix them</li>")
    failing = [r for r in steps if r.get("reward/failed")]
    if failing:
        per = Counter()
        for r in failing:
            per.update(failure_counts(r))
        worst = max(failing, key=lambda r: r.get("reward/failed_frac", 0.0))
        each = ", ".join(f"{html.escape(name)}: {n} samples" for name, n in per.items())
        items.append(f"<li><b>reward failures</b> in {len(failing)} of {len(steps)} steps ({each}; worst step "
                     f"{worst['step']}: {worst.get('reward/failed_frac', 0.0):.0%} of its samples), scored 0; "
                     "log.txt names each sample</li>")
    idle = [r["step"] for r in steps if r.get("train/nothing_to_train")]
    if idle:
        items.append(f"<li><b>nothing to train on</b> in {len(idle)} of {len(steps)} steps (every advantage zero: "
                     f"each group's rewards were equal), first at step {idle[0]}</li>")
    for key, what in (("train/skipped_updates", "policy"), ("value/skipped_updates", "critic")):
        skipped = [r["step"] for r in steps if r.get(key)]
        if skipped:
            items.append(f"<li><b>{what} updates skipped</b> (non-finite loss or gradient) in {len(skipped)} steps, "
                         f"first at step {skipped[0]}</li>")
    items += diagnosis
    return f'<div class="flag"><h2>Warnings</h2><ul>{"".join(items)}</ul></div>' if items else ""


def _samples_section(samples: list[dict], per_step: int = 4) -> str:
    train = [s for s in samples if s.get("split") == "train"]
    if not train:
        return ""
    e = html.escape
    steps = sorted({s["step"] for s in train})
    shown = [s for step in dict.fromkeys([steps[0], steps[-1]])
             for s in [x for x in train if x["step"] == step][:per_step]]
    rows = "".join(f"<tr><td>{s['step']}</td><td>{e(prompt_text(s.get('prompt', '')))}</td>"
                   f"<td>{e(str(s.get('answer', '')))}</td><td><pre>{e(str(s.get('completion', '')))}</pre></td>"
                   f"<td>{s.get('reward', float('nan')):.3g}</td></tr>"
                   for s in shown)
    return ("<h2>Samples (first and last logged step)</h2><table><tr><th>step</th><th>prompt</th><th>answer</th>"
            "<th>completion</th><th>reward</th></tr>" + rows + "</table>")


def find_eval_reports(run: Path, extra: list[Path] = ()) -> list[Path]:
    """RUN/eval*/report.json (where `aha eval --out RUN/eval` writes), then any given folders."""
    found = sorted(p for p in run.glob("eval*/report.json") if p.is_file())
    for folder in extra:
        path = Path(folder) / "report.json" if Path(folder).is_dir() else Path(folder)
        if not path.is_file():
            raise RunReportError(f"--eval {folder}: no report.json there (write one with aha eval --samples N --out "
                                 f"{folder})")
        found.append(path)
    return list(dict.fromkeys(found))


def run_report_html(run: Path, eval_reports: list[Path] = ()) -> str:
    run = Path(run)
    metrics = read_records(run / "metrics.jsonl")
    if not (run / "config.yaml").is_file() or not metrics:
        raise RunReportError(f"{run} is not a run folder with logged steps (no config.yaml or empty metrics.jsonl)")
    import yaml

    config = _read_file(run / "config.yaml", yaml.safe_load, "YAML", (yaml.YAMLError,)) or {}
    monitor = _read_file(run / "monitor.json", json.loads, "JSON") if (run / "monitor.json").is_file() else {}
    flags = monitor.get("flags", {}) if isinstance(monitor, dict) else None
    try:  # what the page reads of the config: a section a person edited out of shape is named
        summary = _config_summary(config)
        total, label_of = (config.get("train") or {}).get("steps"), labels(config)
    except (AttributeError, TypeError, ValueError, KeyError):
        summary = None
    if summary is None or not isinstance(flags, dict) or not all(
            isinstance(f, dict) and {"step", "detail"} <= set(f) for f in flags.values()):
        raise RunReportError(f"{run}: config.yaml (or monitor.json) is not the mapping a run writes")
    data = series(metrics)
    steps = max((r["step"] for r in metrics if "reward/mean" in r), default=0)
    e = html.escape
    parts = [f"<h1>Training run {e(run.name)}</h1>",
             f"<p>{e(summary)}; steps logged: {steps} of {total}.</p>" if total
             else f"<p>{e(summary)}; steps logged: {steps}.</p>"]
    accuracy = data.get("eval/accuracy")
    if accuracy and len(accuracy[1]) > 1:
        parts.append(f"<p>Held-out greedy accuracy {pct(accuracy[1][0])} (step {accuracy[0][0]}) &rarr; "
                     f"{pct(accuracy[1][-1])} (step {accuracy[0][-1]}).</p>")
    if flags:
        items = "".join(f"<li><b>{e(k)}</b> from step {f['step']}: {e(f['detail'])}</li>" for k, f in flags.items())
        parts.append(f'<div class="flag"><h2>Hacking monitor flags</h2><ul>{items}</ul></div>')
    elif monitor:
        parts.append("<p>Hacking monitor: no flags.</p>")
    parts.append(_alarms_section(metrics, _diagnosis_items(run)))
    parts.append(_headline_table(data))
    plots = []
    for panel in PANELS:
        names = panel.select(list(data))
        if names:
            plots.append(img(panel_png(panel, names, data, flags, label_of), panel.title))
    parts.append("<h2>Over training</h2><div class='plots'>" + "".join(plots) + "</div>")
    parts.append(_samples_section(read_records(run / "samples.jsonl")))
    for path in eval_reports:
        parts.append(f"<h2>Eval: {e(str(path.parent))}</h2>")
        parts.extend(eval_sections(_read_file(path, json.loads, "JSON"), heading="h3"))
    parts.append(f"<details><summary>config.yaml</summary><pre>{e((run / 'config.yaml').read_text())}</pre></details>")
    return page(f"aha run: {run.name}", parts)


def write_run_report(run: Path, eval_folders: list[Path] = ()) -> Path:
    """Write RUN/report.html atomically (a reader never sees half a page)."""
    run = Path(run)
    text = run_report_html(run, find_eval_reports(run, list(eval_folders)))
    tmp = run / "report.html.tmp"
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(run / "report.html")
    return run / "report.html"
