"""Claim 2b: GRPO's entropy collapses within a few steps; clip-higher, an entropy bonus or
multi-temperature sampling each keep it up.

The demo's GRPO at a 48-token budget with a symmetric clip (0.2/0.2) against three
interventions on it: clip-higher (0.2/0.28, the demo's own setting), an entropy bonus of 0.01,
and rows of each group sampled at 0.4, 0.8 and 1.2 (the baseline's 0.8 on average). Entropy is
the policy's mean token entropy on the step's completions over the last 5 steps; an intervention
"kept it up" when every one of its seeds is above every symmetric seed. The multi-temperature
runs log each row's entropy at that row's own temperature, so their entropy is not comparable
with the others' and stays out of the verdict (their accuracy is tabled).

    .venv/bin/python bench/findings/entropy_collapse.py [--page-only]
"""

from __future__ import annotations

from statistics import mean

from pages import Found, main
from runner import Claim, Condition, last, measure, spread, tail_mean
from shared import COMMON, CONFIG, GRPO48, SEEDS, STEPS

SYMMETRIC = ("algorithm.clip_high=0.2",)
CLAIM = Claim(
    slug="entropy-collapse", title="GRPO's entropy collapse and what clip-higher, an entropy bonus and "
                                   "multi-temperature sampling do to it",
    source="Cui et al. 2025, entropy mechanism (arXiv:2505.22617); Yu et al. 2025, DAPO (arXiv:2503.14476); "
           "Zhuang et al. 2025, multi-temperature RLVR (arXiv:2510.08892)",
    statement="GRPO's policy entropy collapses early in training, which ends exploration; decoupling the clip "
              "range (clip-higher) keeps entropy up, as an entropy bonus or sampling at several temperatures "
              "is meant to.",
    config=CONFIG,
    conditions=[Condition("GRPO, symmetric clip 0.2", SYMMETRIC), GRPO48,
                Condition("symmetric + entropy bonus 0.01", (*SYMMETRIC, "algorithm.entropy_coef=0.01")),
                Condition("symmetric + temperatures 0.4/0.8/1.2", (*SYMMETRIC, "rollout.temperatures=[0.4,0.8,1.2]"))],
    seeds=SEEDS, common=COMMON)


def first_entropy(records: list[dict]) -> float:
    held = [r["entropy"] for r in records if "entropy" in r]
    if not held:
        raise ValueError("no entropy logged")
    return float(held[0])


def analyse(root) -> Found:
    base, *fixes = (c.name for c in CLAIM.conditions)
    judged = fixes[:2]  # clip-higher and the entropy bonus; the temperatures' entropy is measured at other temperatures
    entropy = measure(CLAIM, root, tail_mean("entropy", 5))
    start = measure(CLAIM, root, first_entropy)
    accuracy = measure(CLAIM, root, last("eval/accuracy"))
    collapsed = mean(entropy[base]) < 0.25 * mean(start[base])
    kept = [name for name in judged if min(entropy[name]) > max(entropy[base])]
    if collapsed and len(kept) == len(judged):
        verdict = "reproduced"
    elif not collapsed or not kept:
        verdict = "not reproduced"
    else:
        verdict = "mixed"
    key = (f"entropy {mean(start[base]):.2f} -> {mean(entropy[base]):.2f} (symmetric GRPO, last 5 of {STEPS} steps); "
           + ", ".join(f"{n.split('+')[-1].split('(')[0].strip()} {mean(entropy[n]):.2f}" for n in judged))
    reason = (f"With a symmetric clip the entropy fell from {mean(start[base]):.2f} at step 1 to "
              f"{mean(entropy[base]):.2f} over the last 5 steps ({'collapsed' if collapsed else 'not a collapse'}: "
              "below a quarter of its start is the test). Kept above every symmetric seed by every seed of its own "
              "(clip-higher and the entropy bonus are judged; the temperatures' entropy is not comparable): "
              + (", ".join(kept) if kept else "none") + ". Held-out accuracy after training: "
              + ", ".join(f"{name} {mean(got):.1%} (spread {spread(got):.1%})" for name, got in accuracy.items())
              + ".")
    tables = {"policy entropy at step 1": start, "policy entropy, mean of the last 5 steps": entropy,
              f"held-out greedy accuracy after {STEPS} steps": accuracy}
    panels = {"entropy": "policy entropy", "reward/correct_frac": "training: correct fraction",
              "eval/accuracy": "held-out greedy accuracy"}
    return Found(tables, verdict, reason, key, panels)


if __name__ == "__main__":
    main(CLAIM, analyse)
