"""JSONL task files: one {"prompt": ..., "answer": ...} object per line, extra fields kept.
A code task may give "tests" (for the code_tests reward) instead of an answer."""

from __future__ import annotations

from pathlib import Path

from aha.jsonl import read_jsonl
from aha.tasks.errors import TaskError
from aha.tasks.prompts import check_prompt

REQUIRED = ("prompt", "answer")
ANSWER_OR = "tests"  # a code task's reference is its tests


def read_prompt_rows(path: Path, missing, file_label: str, row_label: str) -> list[tuple[str, dict]]:
    """(file:line, row) for each line of a JSONL file of rows that hold a prompt: the file must
    exist and hold rows, each a JSON object whose fields `missing(row)` finds complete (it
    returns what is absent, as text, or None) and whose prompt is a prompt. Each problem is a
    TaskError naming the file and line. Task files and training data (sft, pairs) share it."""
    if not path.is_file():
        raise TaskError(f"{file_label} file not found: {path}")
    rows = []
    for lineno, row in read_jsonl(path, TaskError):
        where = f"{path}:{lineno}"
        if not isinstance(row, dict):
            raise TaskError(f"{where}: each line must be a JSON object, got {type(row).__name__}")
        absent = missing(row)
        if absent:
            raise TaskError(f"{where}: missing field(s) {absent}")
        problem = check_prompt(row["prompt"], where)
        if problem:
            raise TaskError(problem)
        rows.append((where, row))
    if not rows:
        raise TaskError(f"{path}: no {row_label} (empty file)")
    return rows


def _missing_task_fields(sample: dict) -> str | None:
    absent = [k for k in REQUIRED if k not in sample and not (k == "answer" and ANSWER_OR in sample)]
    if not absent:
        return None
    return ", ".join(absent) + (" (or tests, for a code task)" if "answer" in absent else "")


def load_jsonl(path: Path) -> list[dict]:
    samples = []
    for where, sample in read_prompt_rows(path, _missing_task_fields, "task data", "samples"):
        sample.setdefault("id", f"{path.name}:{where.rsplit(':', 1)[1]}")
        samples.append(sample)
    return samples
