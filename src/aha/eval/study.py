"""`aha eval --samples N --model A --model B`: sample each model once (cached), summarise,
compare, and write report.json and report.html."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from aha.config import Config
from aha.eval.compare import RANK_PREFIX, RANKINGS, VOTE_WEIGHTS, compare, examples, summarize
from aha.eval.ranking import rank_scores, ranker_file
from aha.eval.sampling import SampleCache, draw_samples
from aha.eval.scoring import build_scorer, held_out_name
from aha.eval.temperatures import draw_seed, entry_label, folder_name, pool_samples
from aha.models.loading import weights_id
from aha.rewards import RewardError, build_reward
from aha.tracking.report import eval_report_html


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label.strip("/"))[-80:] or "model"


def is_bare_checkpoint(folder: Path) -> bool:
    """A training checkpoint written without its tokenizer (by an older aha): it loads only
    as the run's base model with the checkpoint's weights."""
    return all((folder / f).is_file() for f in ("state.json", "model.safetensors")) and \
        not (folder / "tokenizer_config.json").is_file()


def load_for_eval(label: str, config: Config):
    """A model name or folder, or a training checkpoint (checkpoints/step-N, itself a model
    folder); an older checkpoint without its tokenizer is config.model with its weights."""
    from aha.models import load
    from aha.models.checkpoints import load_weights

    folder = Path(label)
    if is_bare_checkpoint(folder):
        loaded = load(config.model, seed=config.seed)
        load_weights(loaded.model, folder)
        return loaded
    return load(label, seed=config.seed)


def run_study(config: Config, models: list[str], n: int, out: Path) -> dict:
    from aha.tasks import build_task

    task = build_task(config.task, config.base_dir)
    problems = task.eval[: config.eval.limit] if config.eval.limit else task.eval
    scorer, rankers = build_scorer(config), build_rankers(config)  # no worker process starts before first use
    try:
        report = _study(config, models, n, out, task, problems, scorer, rankers)
    finally:
        scorer.close()
        for reward, _ in rankers.values():
            reward.close()
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.html").write_text(eval_report_html(report), encoding="utf-8")
    return report


def build_rankers(config: Config) -> dict:
    """name -> (reward, spec) for each eval.rank_by entry; each entry is its own ranker."""
    rankers = {}
    for i, spec in enumerate(config.eval.rank_by):
        reward = build_reward([spec], config.base_dir, section=f"eval.rank_by[{i}]", dtype=config.train.dtype)
        name = reward.components[0].name
        if name in rankers or name in RANKINGS or name in VOTE_WEIGHTS:
            raise RewardError(f"eval.rank_by[{i}]: the name {name!r} is taken; set eval.rank_by[{i}].name")
        rankers[name] = (reward, spec)
    return rankers


def _study(config: Config, models: list[str], n: int, out: Path, task, problems, scorer, rankers) -> dict:
    """Each model's summary; with eval.temperatures, one a temperature and one of their pool."""
    temperatures = config.eval.temperatures
    summaries, samples = {}, {}
    task_of = {p["id"]: p["task"] for p in problems} if config.task.mixture else None  # tagged by tasks/mixture.py
    for label in models:
        by_temperature = _sample(config, label, n, out, task, problems, scorer, rankers, temperatures or [None])
        if temperatures:
            entries = [(entry_label(label, [t]), [t], by_temperature[t]) for t in temperatures]
            entries.append((entry_label(label, temperatures), temperatures, pool_samples(by_temperature)))
        else:
            entries = [(label, [config.rollout.temperature], by_temperature[None])]
        for name, drawn_at, by_problem in entries:
            summaries[name] = {**summarize(by_problem, seed=config.seed, task_of=task_of), "model": label,
                               "temperatures": drawn_at}
            samples[name] = by_problem
    # two models are compared as a whole: by their pools where there are temperatures
    main = [entry_label(label, temperatures) if temperatures else label for label in models]
    comparison = compare({name: summaries[name] for name in main})
    report = {"task": held_out_name(config, task.name), "samples_per_problem": n, "models": summaries,
              "comparison": comparison, "examples": examples(problems, samples, comparison)}
    if temperatures:
        report["temperatures"] = temperatures
    return report


def _sample(config: Config, label: str, n: int, out: Path, task, problems, scorer, rankers,
            temperatures: list[float | None]) -> dict[float | None, dict[str, list[dict]]]:
    """n samples of every problem at each temperature (None: rollout.temperature), each from
    its own cache; the model is loaded only to draw what a cache lacks, once for them all."""
    from aha.models.compute import placement
    from aha.rollout import build_engine

    ro = config.rollout
    max_new = config.eval.max_new_tokens or ro.max_new_tokens
    # the task's settings, not the number of problems: eval.limit may grow over a cache
    fingerprint = hashlib.sha256(config.task.model_dump_json().encode()).hexdigest()[:16]
    folders = {t: out / "samples" / folder_name(_slug(label), t) for t in temperatures}
    caches = {}
    for t in temperatures:
        meta = {"model": str(Path(label).resolve()) if Path(label).exists() else label, "task": task.name,
                "task_config": fingerprint, "temperature": ro.temperature if t is None else t, "top_p": ro.top_p,
                "max_new_tokens": max_new, "scorer": scorer.key, "seed": config.seed,
                "weights": weights_id(label, config.seed)}  # a model retrained in place has other weights
        caches[t] = SampleCache(folders[t], meta)
    have = {t: cache.load() for t, cache in caches.items()}
    short = [t for t in temperatures if any(len(have[t].get(p["id"], [])) < n for p in problems)]
    drawn = {t: {p["id"]: have[t][p["id"]][:n] for p in problems} for t in temperatures if t not in short}
    if short:  # load the model only to draw what is missing
        loaded = load_for_eval(label, config)
        device, dtype = placement(config.device, config.train.dtype)
        engine = build_engine(ro, loaded.model.to(device), loaded.tokenizer, dtype, max_new,
                              self_certainty=True, seed=config.seed)
        try:
            for t in short:
                at = "" if t is None else f" at T={t:g}"
                drawn[t] = draw_samples(engine, task, problems, scorer, n, caches[t], draw_seed(config.seed, t),
                                        desc=f"sample {label}{at}", have=have[t], temperature=t)
        finally:
            engine.close()
    for t in temperatures:
        for name, (reward, spec) in rankers.items():
            scores = rank_scores(reward, ranker_file(folders[t], name, spec, reward), problems, drawn[t],
                                 desc=f"rank {label} by {name}")
            drawn[t] = {pid: [dict(s, **{f"{RANK_PREFIX}{name}": x}) for s, x in zip(got, scores[pid])]
                        for pid, got in drawn[t].items()}
    return {t: drawn[t] for t in temperatures}
