"""JSONL task files: one {"prompt": ..., "answer": ...} object per line, extra fields kept.
A code task may give "tests" (for the code_tests reward) instead of an answer."""

from __future__ import annotations

from pathlib import Path

from aha.jsonl import read_jsonl
from aha.tasks.errors import TaskError
from aha.tasks.prompts import check_prompt

REQUIRED = ("prompt", "answer")
ANSWER_OR = "tests"  # a code task's reference is its tests


def load_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise TaskError(f"task data file not found: {path}")
    samples = []
    for lineno, sample in read_jsonl(path, TaskError):
        if not isinstance(sample, dict):
            raise TaskError(f"{path}:{lineno}: each line must be a JSON object, got {type(sample).__name__}")
        missing = [k for k in REQUIRED if k not in sample and not (k == "answer" and ANSWER_OR in sample)]
        if missing:
            raise TaskError(f"{path}:{lineno}: missing field(s) {', '.join(missing)}"
                            + (" (or tests, for a code task)" if "answer" in missing else ""))
        problem = check_prompt(sample["prompt"], f"{path}:{lineno}")
        if problem:
            raise TaskError(problem)
        sample.setdefault("id", f"{path.name}:{lineno}")
        samples.append(sample)
    if not samples:
        raise TaskError(f"{path}: no samples (empty file)")
    return samples
