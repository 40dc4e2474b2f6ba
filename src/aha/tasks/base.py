"""The Task dataclass and building a task from config (prompts to tokens: aha/prompts.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aha.config import BUILT_IN_TASKS, TaskConfig
from aha.config.mixture import task_label
from aha.config.paths import resolve_path
from aha.errors import TaskError
from aha.tasks.arithmetic import arithmetic_splits
from aha.tasks.mixture import interleaved, tagged
from aha.tasks.procedural import TASKS, procedural_splits
from aha.tasks.samples import Fields, load_samples
from aha.tasks.split import split_rows


@dataclass
class Task:
    """train and eval are lists of samples: dicts with at least `id`, `prompt`, `answer`
    (extra fields are kept and passed to reward functions)."""

    name: str
    train: Sequence[dict]  # a list, or StreamedSamples (task.stream): read from disk when indexed
    eval: Sequence[dict]
    system_prompt: str | None = None
    few_shot: list[dict] = field(default_factory=list)


BUILT_IN = tuple(BUILT_IN_TASKS)


def build_task(cfg: TaskConfig, base_dir: str | Path = ".") -> Task:
    """The run's task: one task, or (task.mixture) several in one, each sample tagged with its own."""
    for i, shot in enumerate(cfg.few_shot):
        if set(shot) != {"prompt", "answer"}:
            raise TaskError(f"task.few_shot[{i}] must have exactly the keys prompt and answer, got {sorted(shot)}")
    if not getattr(cfg, "mixture", None):
        return _one_task(cfg, base_dir)
    labels, trains, evals = [], [], []
    for i, entry in enumerate(cfg.mixture):
        where = f"task.mixture[{i}] ({task_label(entry)})"
        try:
            one = _one_task(entry, base_dir)
        except TaskError as err:
            raise TaskError(f"{where}: {err}") from None
        labels.append(task_label(entry))
        trains += tagged(labels[-1], one.train, where)
        evals.append(tagged(labels[-1], one.eval, where))
    return Task("+".join(labels), trains, interleaved(evals), cfg.system_prompt, list(cfg.few_shot))


def _one_task(cfg: TaskConfig, base_dir: str | Path) -> Task:
    if cfg.name in BUILT_IN and cfg.data is not None:
        raise TaskError(f"task: task.name {cfg.name!r} is a built-in task and task.data a JSONL task; set one of them "
                        "(with task.data, task.name only names your task: pick a name that is not a built-in's)")
    if cfg.data is not None:
        base = Path(base_dir)
        data = resolve_path(cfg.data, base)
        several_splits = (data / "dataset_dict.json").is_file()  # what save_to_disk writes for splits
        if cfg.eval_data is None and cfg.eval_fraction is None and not several_splits:
            raise TaskError("task.data needs held-out samples for evaluation: give task.eval_data (a file of them), or "
                            "task.eval_fraction (e.g. 0.1: that share of task.data's rows held out, the same ones on "
                            "every run), or a datasets folder of several splits (task.eval_split)")
        fields = Fields(cfg.prompt_field, cfg.answer_field, cfg.prompt_template)
        train = load_samples(data, fields, cfg.split, cfg.stream)
        if cfg.eval_fraction is not None:
            train, held_out = split_rows(train, cfg.eval_fraction, "task.eval_fraction", cfg.seed)
        else:
            held_out = load_samples(data if cfg.eval_data is None else resolve_path(cfg.eval_data, base), fields,
                                    cfg.eval_split, cfg.stream)
        name = cfg.name or data.stem
    elif cfg.name == "arithmetic" or (cfg.name is None and cfg.eval_data is None):
        # no name and no file: the default task, so `task.num_eval=50` alone keeps it
        train, held_out = arithmetic_splits(cfg)
        name = "arithmetic"
    elif cfg.name in TASKS:
        train, held_out = procedural_splits(cfg)
        name = cfg.name
    elif cfg.name is None:
        raise TaskError("task.eval_data needs task.data (the training samples of the same JSONL task)")
    else:
        raise TaskError(f"task.name: unknown built-in task {cfg.name!r} (built-in: {', '.join(BUILT_IN)}); or set "
                        "task.data")
    return Task(name, train, held_out, cfg.system_prompt, list(cfg.few_shot))


def check_answers(task: Task, key: str, fix: str) -> None:
    """A TaskError naming the first training sample with no answer, for a method that shows
    each prompt's answer to the policy (key: the setting that does; fix: what turns it off).
    A streamed task is read through once."""
    for sample in task.train:
        if sample.get("answer") in (None, ""):
            raise TaskError(f"{key} shows each prompt's answer, and task {task.name}'s training sample "
                            f"{sample.get('id')!r} has none: give every sample an answer, or set {fix}")
