"""From cached samples to numbers: each model's curves over k, and how two models differ."""

from __future__ import annotations

import numpy as np

from aha.eval.estimators import (
    best_of_k,
    bootstrap_ci,
    brier_score,
    coverage,
    expected_calibration_error,
    ks_up_to,
    length_stats,
    pass_at_k_table,
    vote_at_k,
)
from aha.rewards.shaping import stated_confidence

CORRECT_MIN = 0.5  # a sample whose score is at least this counts as correct
# per-sample scores: best-of-k answers with the sample a score ranks first among k; weighted
# voting sums a score (>= 0) per answer. "rank/<name>" fields are rewards named in eval.rank_by.
RANKINGS = {"mean log-prob": "mean_logprob", "self-certainty": "self_certainty"}
VOTE_WEIGHTS = {"self-certainty": "self_certainty", "stated confidence": "stated_confidence"}
RANK_PREFIX = "rank/"
MIN_VOTABLE = 0.9  # voting needs the answer of at least this share of the samples judged correct


def voting_blocker(answers: list[str | None], correct: list[bool]) -> str | None:
    """Why majority voting cannot be computed on these samples, or None when it can. A sample
    without a readable answer (a number, \\boxed{}, an 'Answer:' line) casts no vote, so
    when the correct samples mostly lack one, maj@k would read as ~0% for a model that is
    often right (free-text answers); that is not a measurement, so it is not reported."""
    if not any(a is not None for a in answers):
        return ("no sample has an answer voting can read (a final number, \\boxed{...} or an 'Answer: ...' line); "
                "ask for one in the prompt to measure maj@k")
    right = [a for a, c in zip(answers, correct) if c]
    readable = sum(a is not None for a in right) / len(right) if right else 1.0
    if readable < MIN_VOTABLE:
        return (f"only {readable:.0%} of the samples judged correct have an answer voting can read (a final number, "
                "\\boxed{...} or an 'Answer: ...' line); the rest would count as no vote")
    return None


def _curve(per_problem: np.ndarray, ks: list[int], seed: int) -> dict:
    lo, hi = bootstrap_ci(per_problem, seed=seed)
    return {"k": ks, "mean": np.nanmean(per_problem, axis=0).tolist(), "lo": lo.tolist(), "hi": hi.tolist()}


def task_curve_name(task: str) -> str:
    """The pass@k curve of one task of a mixture, beside the whole eval set's."""
    return f"pass@k [{task}]"


def curve_task(name: str) -> str | None:
    """The task of a curve task_curve_name named; None for any other curve."""
    return name[len("pass@k ["):-1] if name.startswith("pass@k [") and name.endswith("]") else None


def summarize(by_problem: dict[str, list[dict]], seed: int = 0, vote_draws: int = 200,
              task_of: dict[str, str] | None = None) -> dict:
    """Curves over k = 1, 2, 4, ..., n (mean over problems with a 95% bootstrap band):
    pass@k; maj@k and voting weighted by self-certainty, a stated confidence or an
    eval.rank_by reward; best-of-k ranked by mean log-prob, self-certainty or an eval.rank_by
    reward. Plus length and, where completions state a confidence, calibration. task_of (a
    mixture's problem id -> task): pass@k of each task's problems too, as "pass@k [task]"."""
    ids = sorted(by_problem)
    n = min(len(by_problem[i]) for i in ids)
    ks = ks_up_to(n)
    samples = {i: [dict(s, stated_confidence=stated_confidence(s["completion"])) for s in by_problem[i][:n]]
               for i in ids}
    correct = {i: [s["score"] >= CORRECT_MIN for s in samples[i]] for i in ids}
    counts = [sum(correct[i]) for i in ids]
    per_problem = lambda fn: _curve(np.array([[fn(i, k) for k in ks] for i in ids]), ks, seed)
    column = lambda i, field: [s.get(field) for s in samples[i]]
    vote = lambda i, k, weights=None: vote_at_k(column(i, "answer"), correct[i], k, weights, draws=vote_draws,
                                                seed=seed)
    curves = {"pass@k": _curve(pass_at_k_table([n] * len(ids), counts, ks), ks, seed)}
    for task in dict.fromkeys(task_of[i] for i in ids) if task_of else ():
        mine = [c for i, c in zip(ids, counts) if task_of[i] == task]
        curves[task_curve_name(task)] = _curve(pass_at_k_table([n] * len(mine), mine, ks), ks, seed)
    blocker = voting_blocker([a for i in ids for a in column(i, "answer")], [c for i in ids for c in correct[i]])
    if blocker is None:
        curves["maj@k"] = per_problem(vote)
    extra = sorted({f for i in ids for s in samples[i] for f in s if f.startswith(RANK_PREFIX)})
    # a cache drawn before a score existed lacks it
    has = lambda field: all(field in s for i in ids for s in samples[i])
    for name, field in {**RANKINGS, **{f[len(RANK_PREFIX):]: f for f in extra}}.items():
        if has(field):
            curves[f"best_of_k ({name})"] = per_problem(lambda i, k: best_of_k(column(i, field), correct[i], k))
    for name, field in {**VOTE_WEIGHTS, **{f[len(RANK_PREFIX):]: f for f in extra}}.items():
        # a sample stating no confidence gets no vote
        if blocker is None and (field == "stated_confidence" or has(field)):
            weights = {i: [w if w is not None and w > 0 else 0.0 for w in column(i, field)] for i in ids}  # NaN: none
            if any(any(w) for w in weights.values()):
                curves[f"weighted maj@k ({name})"] = per_problem(lambda i, k: vote(i, k, weights[i]))
    flat = [s for i in ids for s in samples[i]]
    summary = {"problems": len(ids), "samples_per_problem": n, "curves": curves,
               "length": length_stats([s["length"] for s in flat], [s["truncated"] for s in flat]),
               "solved": {i: c for i, c in zip(ids, counts)}}
    if blocker is not None:
        summary["not_computable"] = {"maj@k": blocker}
    stated = [(s["stated_confidence"], s["score"] >= CORRECT_MIN) for s in flat]
    stated = [(q, c) for q, c in stated if q is not None]
    if stated:
        confidence, hits = zip(*stated)
        summary["calibration"] = {"stated": len(stated), "ece": expected_calibration_error(confidence, hits),
                                  "brier": brier_score(confidence, hits)}
    return summary


def crossings(a: dict, b: dict) -> list[dict]:
    """Where curve a's mean goes from above b to below (or back), between consecutive ks."""
    out = []
    diff = [x - y for x, y in zip(a["mean"], b["mean"])]
    for j in range(1, len(diff)):
        if diff[j - 1] * diff[j] < 0 or (diff[j] == 0 and diff[j - 1] != 0):
            out.append({"between_k": [a["k"][j - 1], a["k"][j]], "before": diff[j - 1], "after": diff[j]})
    return out


def compare(summaries: dict[str, dict]) -> dict:
    """For two models: which problems each solves at any k, and where their pass@k curves cross."""
    names = list(summaries)
    if len(names) != 2:
        return {}
    a, b = (summaries[name] for name in names)
    shared = sorted(set(a["solved"]) & set(b["solved"]))
    cov = coverage([a["solved"][i] > 0 for i in shared], [b["solved"][i] > 0 for i in shared])
    return {"models": names,
            "coverage": {key: [shared[j] for j in idx] for key, idx in cov.items()},
            "pass@k_crossings": crossings(a["curves"]["pass@k"], b["curves"]["pass@k"])}


def examples(problems: list[dict], by_model: dict[str, dict[str, list[dict]]], comparison: dict,
             per_group: int = 2) -> list[dict]:
    """A few problems from each coverage group (or the first ones, for one model), with each
    model's solve count and one sample: a correct one where there is one."""
    groups = comparison.get("coverage") or {"all": [p["id"] for p in problems]}
    by_id = {p["id"]: p for p in problems}
    out = []
    for group, ids in groups.items():
        for pid in ids[:per_group]:
            models = {}
            for label, samples in by_model.items():
                done = samples[pid]
                right = [s for s in done if s["score"] >= CORRECT_MIN]
                models[label] = {"correct": len(right), "n": len(done), "sample": (right or done)[0]["completion"]}
            out.append({"group": group, "id": pid, "prompt": by_id[pid]["prompt"], "answer": by_id[pid].get("answer"),
                        "models": models})
    return out
