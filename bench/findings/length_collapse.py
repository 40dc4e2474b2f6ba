"""Claim 2a: a small model reaches high accuracy by drastically shortening its responses.

The demo's GRPO at a 48-token training budget (the runs shared with the entropy and length-penalty
findings): held-out greedy accuracy and the greedy completions' mean length (tokens, at the
held-out budget of 32) before training and after 20 steps, and the training completions' length
at the first step and over the last 5.

    .venv/bin/python bench/findings/length_collapse.py [--page-only]
"""

from __future__ import annotations

from statistics import mean

from pages import Found, main
from runner import Claim, at, first, measure, noise, spread, tail_mean
from shared import COMMON, CONFIG, GRPO48, SEEDS, STEPS

CLAIM = Claim(
    slug="length-collapse", title="Small models gain accuracy by shortening their answers",
    source="Lu, Zhang et al. 2025, Do ToM benchmarks need explicit reasoning? (arXiv:2504.01698)",
    statement="RL with a rule-based reward raises small models' (<= 3B) accuracy while their responses become "
              "drastically shorter (\"reasoning collapse\"), where 7B models learn longer, structured reasoning.",
    config=CONFIG, conditions=[GRPO48], seeds=SEEDS, common=COMMON)


def analyse(root) -> Found:
    name = GRPO48.name
    table = {}
    for title, read in {"held-out greedy accuracy before training": at("eval/accuracy", 0),
                        f"held-out greedy accuracy after {STEPS} steps": at("eval/accuracy", STEPS),
                        "held-out greedy length before training (tokens)": at("eval/length", 0),
                        f"held-out greedy length after {STEPS} steps (tokens)": at("eval/length", STEPS),
                        "training completion length at step 1 (tokens)": first("length/mean"),
                        "training completion length, mean of the last 5 steps (tokens)": tail_mean("length/mean", 5)
                        }.items():
        table[title] = measure(CLAIM, root, read)
    acc0, acc1, len0, len1, train0, train1 = (v[name] for v in table.values())
    shorter = [b / a for a, b in zip(len0, len1)]  # each seed's held-out length after / before
    gained = [b - a for a, b in zip(acc0, acc1)]
    up = all(g > noise(a, 200) for a, g in zip(acc0, gained))  # beyond two standard errors on 200 problems
    if up and all(r <= 0.5 for r in shorter):
        verdict = "reproduced"
    elif up and any(r <= 0.5 for r in shorter):
        verdict = "mixed"
    else:
        verdict = "not reproduced"
    key = (f"held-out {mean(acc0):.1%} -> {mean(acc1):.1%} while greedy length {mean(len0):.1f} -> {mean(len1):.1f} "
           "tokens")
    reason = (f"Every seed gained accuracy ({', '.join(f'{g:+.1%}' for g in gained)}); the held-out greedy "
              f"completions ended at {', '.join(f'{r:.0%}' for r in shorter)} of their length before training "
              f"(halved or more is the test) and the training completions went from {mean(train0):.1f} to "
              f"{mean(train1):.1f} tokens (spread of the end: {spread(train1):.1f}).")
    if not up:
        reason = "Not every seed gained accuracy beyond two standard errors. " + reason.split("; ", 1)[1]
    notes = ("The budget is small (48 tokens in training, 32 held out), so there is no long chain of thought to "
             "collapse: what shortens is the answer's form (a sentence or two around the product against a bare "
             "\"a * b = c\"), which is what the length tables measure. A confound built into the demo's config: "
             "a completion cut at the budget scores 0 (truncated_reward), which rewards stopping as such; the "
             "held-out budget (32 tokens) is below the training one (48), so a form that finishes within 48 "
             "but not 32 tokens is cut there.")
    panels = {"length/mean": "training completion length (tokens)", "eval/length": "held-out greedy length (tokens)",
              "eval/accuracy": "held-out greedy accuracy"}
    return Found(table, verdict, reason, key, panels, notes)


if __name__ == "__main__":
    main(CLAIM, analyse)
