"""`aha eval --search greedy_step|beam`: the search of every held-out problem (eval/search.py),
then best-of-N at an equal number of generated tokens, both scored by eval.scorer.

Best-of-N draws whole samples of every problem, one round (one more sample of each) at a time,
until its tokens reach the search's; N is the number of rounds whose total is nearest the
search's (algorithms/search.equal_token_n). The same judge (eval.search_scorer) picks each
problem's best of its N samples, as it ranked the search's candidates. Both sample at
rollout.temperature and rollout.top_p with the same token budget. Only sampled tokens are
counted: the search also re-reads its kept prefix (a prefill a step) and runs the judge on
every candidate, which best-of-N does once a sample."""

from __future__ import annotations

import json
import math
from pathlib import Path

from aha.algorithms.search import best_index, candidate_key, equal_token_n
from aha.config import Config, ConfigError
from aha.eval.search import SEARCHES, SearchSettings, search
from aha.tasks import encode_prompts


def build_judge(config: Config):
    """(the reward eval.search_scorer names, whether it judges partial solutions). A process
    reward model does, and must have been trained with eval.search_separator as its separator."""
    from aha.rewards import build_reward
    from aha.rewards.process_reward import DESCRIPTION

    judge = build_reward([config.eval.search_scorer], config.base_dir, section="eval.search_scorer",
                         dtype=config.train.dtype)
    checkpoint = getattr(judge.components[0].fn, "aha_checkpoint", None)
    about = Path(checkpoint) / DESCRIPTION if checkpoint is not None else None
    if about is None or not about.is_file():
        return judge, False
    trained = json.loads(about.read_text())["separator"]
    if trained != config.eval.search_separator:
        judge.close()
        raise ConfigError(f"eval.search_separator is {config.eval.search_separator!r}, but the process reward model "
                         f"eval.search_scorer names ({checkpoint}) was trained on steps joined by {trained!r}: its "
                         f"steps would not be the search's; set eval.search_separator={json.dumps(trained)}")
    return judge, True


def settings_of(config: Config, judges_partial: bool) -> SearchSettings:
    ev = config.eval
    return SearchSettings(width=SEARCHES[ev.search](ev.search_width), expand=ev.search_expand,
                          max_steps=ev.search_max_steps, budget=ev.max_new_tokens or config.rollout.max_new_tokens,
                          separator=ev.search_separator, threshold=ev.correct_threshold, judges_partial=judges_partial)


def draw_rounds(engine, prompts: list[list[int]], search_tokens: int, budget: int, seed: int
                ) -> tuple[list[list[list[int]]], list[int]]:
    """Whole samples of every prompt, round after round until their tokens reach search_tokens:
    (samples[problem][round] token ids, round_tokens[round]). After the first round, the rounds
    still needed are drawn in one call (each prompt prefilled once for them all)."""
    import torch

    samples: list[list[list[int]]] = [[] for _ in prompts]
    rounds: list[int] = []
    while not rounds or sum(rounds) < search_tokens:
        group = 1 if not rounds else max(1, math.ceil((search_tokens - sum(rounds)) / (sum(rounds) / len(rounds))))
        torch.manual_seed(seed * 1_000_003 + len(rounds))
        out = engine.generate(prompts, group_size=group, max_new_tokens=budget)
        lengths = [int(n) for n in out.lengths().tolist()]
        drawn = [0] * group
        for row, p in enumerate(out.prompt_index.tolist()):
            samples[p].append(out.completion_ids[row, :lengths[row]].tolist())
            drawn[row % group] += lengths[row]
        rounds += drawn
    return samples, rounds


def best_of_n(engine, task, problems: list[dict], judge, scorer, settings: SearchSettings, search_tokens: int,
              seed: int) -> dict:
    """Best-of-N at the search's token count: N, its tokens, each problem's pick and its score."""
    prompts = encode_prompts(engine.tokenizer, task, problems)
    samples, rounds = draw_rounds(engine, prompts, search_tokens, settings.budget, seed)
    n = equal_token_n(search_tokens, rounds)
    flat = [(i, ids) for i, drawn in enumerate(samples) for ids in drawn[:n]]
    texts = engine.tokenizer.batch_decode([ids for _, ids in flat], skip_special_tokens=True)
    rows, lengths = [problems[i] for i, _ in flat], [len(ids) for _, ids in flat]
    judged = judge.score(texts, rows, lengths)
    keys = [candidate_key(None if failed else total, True, settings.judges_partial, settings.threshold)
            for total, failed in zip(judged.total.tolist(), judged.failed.tolist())]
    scores = scorer.score(texts, rows, lengths)
    picks = [i * n + best_index(keys[i * n:(i + 1) * n]) for i in range(len(problems))]
    return {"n": n, "tokens": sum(rounds[:n]), "drawn_tokens": sum(rounds),
            "picks": [{"completion": texts[j], "score": scores[j], "tokens": lengths[j],
                       "judge": None if judged.failed[j] else float(judged.total[j])} for j in picks],
            # each problem's best eval.scorer score among its N: what a judge that never errs would get
            "oracle": sum(max(scores[i * n:(i + 1) * n]) for i in range(len(problems))) / max(len(problems), 1)}


def run_search(config: Config, loaded, seed: int | None = None) -> dict:
    """The search and best-of-N at equal tokens on the held-out problems (eval.limit first),
    with loaded (a models.load result) as the policy: the numbers and each problem's record."""
    import torch

    from aha.eval.scoring import build_scorer, held_out_name
    from aha.models.compute import placement
    from aha.rollout import build_engine
    from aha.tasks import build_task

    seed = config.seed if seed is None else seed
    task = build_task(config.task, config.base_dir)
    problems = task.eval[: config.eval.limit] if config.eval.limit else task.eval
    scorer = build_scorer(config)  # before the judge loads: a bad eval.scorer fails in a second
    judge = None
    try:
        judge, judges_partial = build_judge(config)
        settings = settings_of(config, judges_partial)
        device, dtype = placement(config.device, config.train.dtype)
        engine = build_engine(config.rollout, loaded.model.to(device), loaded.tokenizer, dtype, settings.budget,
                              seed=seed)
        try:
            torch.manual_seed(seed)
            found = search(engine, task, problems, judge, settings, desc=f"{config.eval.search} search")
            texts = engine.tokenizer.batch_decode([f.answer.ids for f in found], skip_special_tokens=True)
            scores = scorer.score(texts, problems, [len(f.answer.ids) for f in found])
            tokens = sum(f.tokens for f in found)
            bon = best_of_n(engine, task, problems, judge, scorer, settings, tokens, seed + 1)
        finally:
            engine.close()
    finally:
        scorer.close()
        if judge is not None:
            judge.close()
    n = max(len(problems), 1)
    records = [{"id": p["id"], "prompt": p["prompt"], "answer": p.get("answer"), "completion": text, "score": score,
                "judge": f.answer.score, "steps": f.answer.steps, "tokens": f.tokens, "rounds": f.rounds,
                "best_of_n": pick} for p, f, text, score, pick in zip(problems, found, texts, scores, bon["picks"])]
    return {"task": held_out_name(config, task.name), "model": loaded.name, "problems": len(problems),
            "search": config.eval.search, "width": settings.width, "expand": settings.expand,
            "max_steps": settings.max_steps, "separator": settings.separator, "budget": settings.budget,
            "judge": judge.components[0].name, "judges": "steps" if judges_partial else "finished answers",
            "scorer": scorer.describe, "accuracy": sum(scores) / n, "tokens": tokens,
            "mean_steps": sum(f.answer.steps for f in found) / n,
            "best_of_n": {"n": bon["n"], "accuracy": sum(p["score"] for p in bon["picks"]) / n,
                          "tokens": bon["tokens"], "oracle": bon["oracle"]},
            "records": records}


def format_search(report: dict) -> list[str]:
    """What `aha eval --search` prints: the task, then the search and best-of-N a line each."""
    p, bon = max(report["problems"], 1), report["best_of_n"]
    shape = "greedy_step" if report["search"] == "greedy_step" else f"beam {report['width']}"
    return [f"{report['model']} on {report['task']}, {report['problems']} problems (right: {report['scorer']}):",
            f"  {shape} x {report['expand']} next steps by {report['judge']} ({report['judges']}): accuracy "
            f"{report['accuracy']:.1%}, {report['tokens']} tokens generated ({report['tokens'] / p:.1f} a problem), "
            f"{report['mean_steps']:.1f} steps an answer",
            f"  best-of-{bon['n']} by {report['judge']} at equal tokens: accuracy {bon['accuracy']:.1%}, "
            f"{bon['tokens']} tokens ({bon['tokens'] / p:.1f} a problem); a judge that never errs: "
            f"{bon['oracle']:.1%}"]
