"""`aha data --from-model MODEL`: off-policy distillation data. A model (the teacher: a stronger
checkpoint, or any model whose answers are worth imitating) answers the task's training
prompts; its completions become SFT rows {prompt, response} for `method: sft` (`sft.data`),
optionally only those the scorer verifies (rejection sampling from the teacher).

The samples go through the same cache as `aha eval --samples` (OUT/teacher_samples/), so an
interrupted run draws only what is missing, and samples of other weights or settings are
never mixed in."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from aha.config import Config
from aha.eval.sampling import SampleCache, draw_samples
from aha.eval.scoring import build_scorer
from aha.models.loading import weights_id

TEACHER_FILE = "teacher_sft.jsonl"
FULL_SCORE = 1.0 - 1e-6  # verified: the scorer's full score (1.0: right under eval.scorer)


@dataclass
class TeacherData:
    """What `aha data --from-model` wrote, and what it left out."""

    path: Path
    rows: int  # written
    samples: int  # drawn
    verified: int  # of the samples, those with the scorer's full score
    truncated: int  # of the samples, those cut at rollout.max_new_tokens (never written)

    def describe(self) -> str:
        share = self.verified / max(self.samples, 1)
        return (f"{self.samples} teacher samples: {self.verified} verified ({share:.1%}), {self.truncated} cut at "
                f"max_new_tokens (left out); wrote {self.rows} SFT rows to {self.path}")


def teacher_rows(problems: list[dict], by_problem: dict[str, list[dict]], verified_only: bool,
                 model: str) -> list[dict]:
    """SFT rows {id, prompt, response, answer, score, model} from scored samples, problem by
    problem. A completion cut at max_new_tokens is left out: it never ended, and SFT (which
    appends the stop token) would teach the model to stop wherever the budget cut it."""
    rows = []
    for problem in problems:
        for sample in by_problem[problem["id"]]:
            if sample["truncated"] or not sample["completion"].strip():
                continue
            if verified_only and sample["score"] < FULL_SCORE:
                continue
            rows.append({"id": problem["id"], "prompt": problem["prompt"], "response": sample["completion"],
                         "answer": problem.get("answer"), "score": sample["score"], "model": model})
    return rows


def write_teacher_data(config: Config, model: str, out: str | Path, per_prompt: int = 1, verified_only: bool = False,
                       limit: int | None = None, seed: int = 0) -> TeacherData:
    """Sample per_prompt completions of model for each of the task's training prompts (the
    first `limit`), at rollout.temperature / top_p / max_new_tokens, score them with eval.scorer,
    and write OUT/teacher_sft.jsonl."""
    from aha.eval.study import load_for_eval
    from aha.models.compute import placement
    from aha.rollout import build_engine
    from aha.tasks import build_task

    if per_prompt < 1:
        raise ValueError("--per-prompt must be at least 1")
    out = Path(out)
    task = build_task(config.task, config.base_dir)
    problems = task.train[:limit] if limit else task.train
    scorer = build_scorer(config)  # before the model loads: a bad eval.scorer fails in a second
    ro = config.rollout
    meta = {"model": str(Path(model).resolve()) if Path(model).exists() else model, "task": task.name,
            "task_config": hashlib.sha256(config.task.model_dump_json().encode()).hexdigest()[:16],
            "split": "train", "temperature": ro.temperature, "top_p": ro.top_p, "max_new_tokens": ro.max_new_tokens,
            "scorer": scorer.key, "seed": seed, "weights": weights_id(model, config.seed)}
    try:
        cache = SampleCache(out / "teacher_samples", meta)
        loaded = load_for_eval(model, config)
        device, dtype = placement(config.device, config.train.dtype)
        engine = build_engine(ro, loaded.model.to(device), loaded.tokenizer, dtype, seed=seed)
        try:
            by_problem = draw_samples(engine, task, problems, scorer, per_prompt, cache, seed, desc=f"sample {model}")
        finally:
            engine.close()
    finally:
        scorer.close()
    rows = teacher_rows(problems, by_problem, verified_only, meta["model"])
    drawn = [s for p in problems for s in by_problem[p["id"]]]
    path = out / TEACHER_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
    os.replace(tmp, path)  # a half-written file is never left where sft.data would read it
    return TeacherData(path, len(rows), len(drawn), sum(s["score"] >= FULL_SCORE for s in drawn),
                       sum(bool(s["truncated"]) for s in drawn))
