"""Greedy accuracy of a model on a task's held-out split."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from aha.config.mixture import task_field
from aha.eval.scoring import Scorer
from aha.tasks import Task, encode_prompts

if TYPE_CHECKING:  # the engine's module imports torch; the eval maths need none
    from aha.envs import EpisodeRunner
    from aha.rollout import Engine


@dataclass
class EvalResult:
    accuracy: float  # mean score over the evaluated samples (1.0 right, 0.0 wrong for a reward scorer)
    n: int
    samples: list[dict]  # {id, prompt, answer, completion, score}
    metrics: dict[str, float] = field(default_factory=dict)  # more eval/<name> numbers (length, multi-turn episodes)


def evaluate(engine: Engine, task: Task, scorer: Scorer, limit: int | None = None, max_new_tokens: int | None = None,
             desc: str = "eval", env: EpisodeRunner | None = None) -> EvalResult:
    """Every held-out sample is scored, or a ScorerError names the one that could not be.
    With env, each is a multi-turn episode (evaluate_episodes)."""
    if env is not None:
        return evaluate_episodes(engine, task, env, scorer, limit, max_new_tokens, desc)
    samples = task.eval[:limit] if limit else task.eval
    prompts = encode_prompts(engine.tokenizer, task, samples)
    records, lengths = [], []
    with tqdm(total=len(samples), desc=desc, unit="problem", leave=False) as bar:
        for start in range(0, len(samples), engine.batch_size):
            chunk = samples[start:start + engine.batch_size]
            rollouts = engine.generate(prompts[start:start + len(chunk)], greedy=True, max_new_tokens=max_new_tokens)
            tokens = [int(t) for t in rollouts.lengths().tolist()]  # what length rewards measure
            lengths += tokens
            for sample, text, score in zip(chunk, rollouts.texts, scorer.score(rollouts.texts, chunk, tokens)):
                records.append({"id": sample["id"], "prompt": sample["prompt"], "answer": sample.get("answer"),
                                "completion": text, "score": score, **task_field(sample)})
            bar.update(len(chunk))
    accuracy = sum(r["score"] for r in records) / max(len(records), 1)
    # eval/length: the greedy completions' mean length in tokens, as training's length/mean counts them
    length = {"eval/length": sum(lengths) / len(lengths)} if lengths else {}
    return EvalResult(accuracy, len(records), records, {**length, **per_task(records)})


def by_task(metrics: dict) -> str:
    """'letter_count 40.0% of 100, arithmetic 55.0% of 100' from per_task's metrics; '' for a single task."""
    tasks = [k.split("/")[1] for k in metrics if k.endswith("/accuracy") and k.count("/") == 2]
    return ", ".join(f"{t} {metrics[f'eval/{t}/accuracy']:.1%} of {metrics[f'eval/{t}/n']}" for t in tasks)


def per_task(records: list[dict]) -> dict[str, float]:
    """A task mixture's held-out accuracy and count per task (eval/<task>/accuracy, eval/<task>/n);
    nothing for a single task."""
    scores: dict[str, list[float]] = {}
    for record in records:
        if "task" in record:
            scores.setdefault(record["task"], []).append(record["score"])
    return {key: value for task, got in scores.items()
            for key, value in ((f"eval/{task}/accuracy", sum(got) / len(got)), (f"eval/{task}/n", len(got)))}


def evaluate_episodes(engine: Engine, task: Task, env: EpisodeRunner, scorer: Scorer, limit: int | None = None,
                      max_new_tokens: int | None = None, desc: str = "eval") -> EvalResult:
    """Greedy episodes of the held-out samples in env: accuracy is the scorer's verdict on each
    episode's final action (its last turn), and metrics add the first action's
    (eval/first_turn_accuracy), the mean policy turns (eval/turns) and return (eval/return), and
    the mean of each number the environment reported at an episode's end (eval/final_tool_calls)."""
    samples = task.eval[:limit] if limit else task.eval
    records, first_scores, finals_info = [], [], {}
    with tqdm(total=len(samples), desc=desc, unit="episode", leave=False) as bar:
        for start in range(0, len(samples), engine.batch_size):
            chunk = samples[start:start + engine.batch_size]
            played = env.play(engine, task, chunk, greedy=True, max_new_tokens=max_new_tokens)
            firsts = [e.actions[0] for e in played.episodes]
            finals = [e.actions[-1] for e in played.episodes]
            first_scores += scorer.score(firsts, chunk)
            for key, values in played.result.components.items():  # final_tool_calls: calls an episode made
                if key.startswith("final_"):
                    finals_info.setdefault(key, []).extend(values.tolist())
            for sample, episode, text, score, ret in zip(chunk, played.episodes, played.rollouts.texts,
                                                         scorer.score(finals, chunk), played.result.total.tolist()):
                records.append({"id": sample["id"], "prompt": sample["prompt"], "answer": sample.get("answer"),
                                "completion": text, "score": score, "return": ret, **episode.record(),
                                **task_field(sample)})
            bar.update(len(chunk))
    n = max(len(records), 1)
    metrics = {"eval/first_turn_accuracy": sum(first_scores) / n,
               "eval/turns": sum(len(r["turns"]) for r in records) / n,
               "eval/return": sum(r["return"] for r in records) / n, **per_task(records),
               **{f"eval/{key}": sum(v) / n for key, v in finals_info.items()}}
    return EvalResult(sum(r["score"] for r in records) / n, len(records), records, metrics)
