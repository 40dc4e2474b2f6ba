"""Greedy accuracy of a model on a task's held-out split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from aha.eval.scoring import Scorer
from aha.tasks import Task, encode_prompts

if TYPE_CHECKING:  # the engine's module imports torch; the eval maths need none
    from aha.rollout import Engine


@dataclass
class EvalResult:
    accuracy: float  # mean score over the evaluated samples (1.0 right, 0.0 wrong for a reward scorer)
    n: int
    samples: list[dict]  # {id, prompt, answer, completion, score}


def evaluate(engine: Engine, task: Task, scorer: Scorer, limit: int | None = None, max_new_tokens: int | None = None,
             desc: str = "eval") -> EvalResult:
    """Every held-out sample is scored, or a ScorerError names the one that could not be."""
    samples = task.eval[:limit] if limit else task.eval
    prompts = encode_prompts(engine.tokenizer, task, samples)
    records = []
    with tqdm(total=len(samples), desc=desc, unit="problem", leave=False) as bar:
        for start in range(0, len(samples), engine.batch_size):
            chunk = samples[start:start + engine.batch_size]
            rollouts = engine.generate(prompts[start:start + len(chunk)], greedy=True, max_new_tokens=max_new_tokens)
            for sample, text, score in zip(chunk, rollouts.texts, scorer.score(rollouts.texts, chunk)):
                records.append({"id": sample["id"], "prompt": sample["prompt"], "answer": sample.get("answer"),
                                "completion": text, "score": score})
            bar.update(len(chunk))
    accuracy = sum(r["score"] for r in records) / max(len(records), 1)
    return EvalResult(accuracy, len(records), records)
