"""Greedy accuracy of a model on a task's held-out split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tqdm.auto import tqdm

from aha.tasks import Task, encode_prompts


@dataclass
class EvalResult:
    accuracy: float  # mean scorer value over the evaluated samples
    n: int
    samples: list[dict]  # {id, prompt, answer, completion, score}


def evaluate(engine, task: Task, scorer: Callable[[str, dict], float], limit: int | None = None,
             max_new_tokens: int | None = None, desc: str = "eval") -> EvalResult:
    samples = task.eval[:limit] if limit else task.eval
    prompts = encode_prompts(engine.tokenizer, task, samples)
    records = []
    bar = tqdm(total=len(samples), desc=desc, unit="problem", leave=False)
    for start in range(0, len(samples), engine.batch_size):
        chunk = samples[start:start + engine.batch_size]
        rollouts = engine.generate(prompts[start:start + len(chunk)], greedy=True, max_new_tokens=max_new_tokens)
        for sample, text in zip(chunk, rollouts.texts):
            records.append({"id": sample["id"], "prompt": sample["prompt"], "answer": sample.get("answer"),
                            "completion": text, "score": float(scorer(text, sample))})
        bar.update(len(chunk))
    bar.close()
    accuracy = sum(r["score"] for r in records) / max(len(records), 1)
    return EvalResult(accuracy, len(records), records)
