"""What a rubric judge is asked, and how its answers become one reward per completion.

A rubric is a string (one question to the judge), or a checklist: a list of criteria, each a
string or {criterion, weight, name}, graded yes/no one by one (OpenRubrics, Rubric anchors,
AutoRule: a fraction of rules met). The rubric is the sample's own (`sample[rubric_field]`,
written into the data) or, where the sample has none, the reward's `args.rubric`.

Every question of a batch (completion x criterion, or completion-so-far x criterion per step)
is one Job; the judge grades them all in one batched pass, and `assemble` puts the grades back:
- a string rubric: the grade (a float);
- a checklist: {name: weight / total weight * grade} per criterion, whose sum (the reward) is
  the weighted fraction of criteria met; each criterion is its own reward component;
- steps mode: StepScores, one value per step (the weighted fraction for that step), each
  step split as a process reward model splits it (rewards/process_reward.py).
A job graded None (no grade) makes the completion's reward None: failed, not zero."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from aha.rewards.functions import StepScores


@dataclass(frozen=True)
class Criterion:
    text: str
    weight: float = 1.0
    name: str | None = None  # the reward component's suffix; None for a string rubric (one grade)


@dataclass(frozen=True)
class Job:
    """One question to the judge: does `text` (the completion, or its first steps) meet `criterion`?"""

    row: int  # which completion
    criterion: Criterion
    text: str
    step_end: int | None = None  # steps mode: the character offset where the step ends (StepScores.ends)


def _criterion(item, k: int, where: str) -> Criterion:
    if isinstance(item, str):
        item = {"criterion": item}
    if not isinstance(item, dict):
        raise ValueError(f"{where}[{k}] must be a string or {{criterion, weight}}, got {type(item).__name__}")
    unknown = sorted(set(item) - {"criterion", "weight", "name"})
    if unknown:
        raise ValueError(f"{where}[{k}] takes the keys criterion, weight, name; unknown: {', '.join(unknown)}")
    text, weight = item.get("criterion"), item.get("weight", 1.0)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where}[{k}].criterion must be a non-empty string, got {text!r}")
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not 0 < float(weight) < float("inf"):
        raise ValueError(f"{where}[{k}].weight must be a positive number, got {weight!r}")
    name = item.get("name", f"c{k + 1}")
    if not isinstance(name, str) or not name.strip() or "/" in name:
        raise ValueError(f"{where}[{k}].name must be a non-empty string without '/', got {name!r}")
    return Criterion(text, float(weight), name)


def criteria(rubric, where: str) -> list[Criterion]:
    """The rubric as criteria: [Criterion(text)] for a string, one per item for a list.
    Errors name `where` (the sample and its field, or the reward's args.rubric)."""
    if isinstance(rubric, str):
        if not rubric.strip():
            raise ValueError(f"{where} is blank; the judge needs a non-empty rubric")
        return [Criterion(rubric)]
    if not isinstance(rubric, list) or not rubric:
        raise ValueError(f"{where} must be a non-empty string or a non-empty list of {{criterion, weight}}, got "
                         f"{rubric!r}"[:300])
    found = [_criterion(item, k, where) for k, item in enumerate(rubric)]
    names = [c.name for c in found]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: two criteria are named alike ({', '.join(names)}); give each its own name")
    return found


def sample_criteria(sample: dict, field: str, default) -> list[Criterion]:
    """The sample's own rubric (sample[field]) or else the reward's default, as criteria."""
    if sample.get(field) is not None:
        return criteria(sample[field], f"sample {sample.get('id', '?')!r}: field {field!r}")
    if default is None:
        raise ValueError(f"sample {sample.get('id', '?')!r} has no field {field!r} and the reward sets no args.rubric")
    return criteria(default, "args.rubric")


def split_steps(completion: str, separator: str) -> list[tuple[int, int]]:
    """(where a step's text ends, where the step ends with its separator) for each non-blank
    step of completion.split(separator), as the process reward model splits a completion."""
    steps, start = [], 0
    pieces = completion.split(separator)
    for k, piece in enumerate(pieces):
        end = start + len(piece)
        closed = end + (len(separator) if k < len(pieces) - 1 else 0)
        if piece.strip():
            steps.append((end, closed))
        start = closed
    return steps


def jobs(completions: list[str], samples: list[dict], rubric, field: str, steps: bool, separator: str,
         max_chars: int) -> list[Job]:
    """Every question of the batch, in order: completion by completion, (step by step,)
    criterion by criterion. The judge sees at most max_chars of a completion; in steps mode a
    step that ends past them is not graded."""
    found = []
    for row, (completion, sample) in enumerate(zip(completions, samples)):
        checklist = sample_criteria(sample, field, rubric)
        if not steps:
            found += [Job(row, c, completion[:max_chars]) for c in checklist]
            continue
        for text_end, step_end in split_steps(completion, separator):
            if text_end <= max_chars:
                found += [Job(row, c, completion[:text_end], step_end) for c in checklist]
    return found


def _fraction(graded: list[tuple[Job, float | None]]) -> float | dict[str, float] | None:
    """A string rubric's grade, or a checklist's parts (weight share x grade); None if any is missing."""
    if any(g is None for _, g in graded):
        return None
    if len(graded) == 1 and graded[0][0].criterion.name is None:
        return graded[0][1]
    total = sum(job.criterion.weight for job, _ in graded)
    return {job.criterion.name: job.criterion.weight / total * g for job, g in graded}


def assemble(questions: list[Job], grades: list[float | None], n: int, steps: bool,
             has_steps: list[bool] | None = None) -> list:
    """One reward per completion from the grades of its jobs. Steps mode: StepScores, or
    StepScores((), ()) (a reward of 0) for a completion with no step at all (has_steps False),
    None for one whose steps all end past max_chars."""
    by_row: dict[int, list[tuple[Job, float | None]]] = {}
    for job, grade in zip(questions, grades):
        by_row.setdefault(job.row, []).append((job, grade))
    if not steps:
        return [_fraction(by_row[row]) for row in range(n)]
    out = []
    for row in range(n):
        if row not in by_row:
            out.append(StepScores((), ()) if has_steps is not None and not has_steps[row] else None)
            continue
        by_step: dict[int, list] = {}
        for job, grade in by_row[row]:
            by_step.setdefault(job.step_end, []).append((job, grade))
        values = [_fraction(graded) for graded in by_step.values()]
        if any(v is None for v in values):
            out.append(None)
            continue
        out.append(StepScores(tuple(by_step), tuple(sum(v.values()) if isinstance(v, dict) else v for v in values)))
    return out
