"""Claim 3: an accuracy-adaptive length penalty (A-DLP) and LASER-D shorten completions without
losing accuracy, where a fixed penalty of about the same mean strength loses accuracy.

Four runs of the demo's task at a 48-token budget: no penalty; a fixed penalty of 0.1 x tokens /
48 on every completion; A-DLP (the coefficient starts at 0 and moves by 0.05 x (batch accuracy -
0.15) each step, 0.15 being about the base model's training accuracy, the paper's reference;
every completion pays); LASER-D (a bonus of 0.5 for a correct completion within its difficulty
bucket's target length). The mean coefficient A-DLP reached is tabled beside the fixed one's 0.1.

Settings that keep the strengths comparable, in every condition: advantages are not divided by
the group's std (advantage_scale=none: with it, any length difference in a group of equal
verdicts becomes a unit-size advantage, whatever the coefficient), no dynamic sampling (it would
drop the plain run's tied groups but keep the penalised runs', whose lengths differ), and a
completion cut at the budget scores -0.1, the fixed penalty's full cost (the demo's 0 would pay
a rambling cut answer more than a finished wrong one under a penalty).

    .venv/bin/python bench/findings/length_penalties.py [--page-only]
"""

from __future__ import annotations

from statistics import mean

from pages import Found, main
from runner import Claim, Condition, last, measure, spread, tail_mean
from shared import CONFIG, SEEDS, STEPS

FAIR = ("rollout.max_new_tokens=48", f"train.steps={STEPS}", "eval.every=5", "train.report=false",
        "train.keep_checkpoints=1", "algorithm.advantage_scale=none", "algorithm.dynamic_sampling=false",
        "algorithm.truncated_reward=-0.1")
PLAIN = Condition("no length penalty", ())
FIXED = Condition("fixed penalty 0.1", ("algorithm.length_coef=0.1", "algorithm.length_penalize=all"))
ADLP = Condition("A-DLP (target accuracy 0.15)", (
    "algorithm.length_adaptive=true", "algorithm.length_coef=0.0", "algorithm.length_target_acc=0.15",
    "algorithm.length_coef_rate=0.05", "algorithm.length_penalize=all"))
LASER = Condition("LASER-D", ("algorithm.length_shaping=laser_d",))
CLAIM = Claim(
    slug="length-penalties", title="Adaptive length penalties against a fixed one",
    source="Su & Cardie 2025, A-DLP (arXiv:2505.18298); Liu et al. 2025, LASER (arXiv:2505.15612)",
    statement="an adaptive length penalty (A-DLP, moved by the accuracy) and difficulty-aware length rewards "
              "(LASER-D) shorten reasoning a lot with little or no loss of accuracy, where a static length penalty "
              "of similar strength costs accuracy or hinders learning.",
    config=CONFIG, conditions=[PLAIN, FIXED, ADLP, LASER], seeds=SEEDS, common=FAIR)


def mean_coef(records: list[dict]) -> float:
    """The length penalty's coefficient over the training steps (0 for a run without one)."""
    coefs = [float(r.get("length/penalty_coef", 0.0)) for r in records if "time/step_s" in r]
    return mean(coefs)


def analyse(root) -> Found:
    accuracy = measure(CLAIM, root, last("eval/accuracy"))
    length = measure(CLAIM, root, last("eval/length"))
    train_length = measure(CLAIM, root, tail_mean("length/mean", 5))
    coef = measure(CLAIM, root, mean_coef)
    base = PLAIN.name
    margin = {n: max(spread(accuracy[base]), spread(accuracy[n])) for n in accuracy}  # within this: no loss
    # shorter: by a tenth of the plain length at least, and beyond both conditions' spreads
    shorter = {n: mean(length[n]) < min(0.9 * mean(length[base]),
                                        mean(length[base]) - max(spread(length[base]), spread(length[n])))
               for n in length}
    kept = {n: mean(accuracy[n]) >= mean(accuracy[base]) - margin[n] for n in accuracy}
    adaptive_ok = [n for n in (ADLP.name, LASER.name) if shorter[n] and kept[n]]
    fixed_lost = not kept[FIXED.name]
    if not any(shorter.values()):
        verdict = "not testable here"  # no length rule shortened anything: there was nothing left to shorten
    elif len(adaptive_ok) == 2 and fixed_lost:
        verdict = "reproduced"
    elif not adaptive_ok:
        verdict = "not reproduced"
    else:
        verdict = "mixed"
    key = ", ".join(f"{n.split(' (')[0]} {mean(accuracy[n]):.1%} at {mean(length[n]):.1f} tokens"
                    for n in accuracy) + " (held-out)"
    lengths = [mean(v) for v in length.values()]
    if verdict == "not testable here":
        reason = (f"No length rule shortened the answers: every condition ended at {min(lengths):.1f}-"
                  f"{max(lengths):.1f} tokens held out, the plain run included ({mean(length[base]):.1f}). On this "
                  "task every run settles on a bare \"a * b = c\" (or \"a * b equals c\"), the shortest answer "
                  "there is, within a few steps (a cut completion scores -0.1 in all four), so a penalty has "
                  "nothing left to remove and the claim needs answers with reasoning to shorten. Accuracy: "
                  + ", ".join(f"{n} {mean(accuracy[n]):.1%} (spread {spread(accuracy[n]):.1%})" for n in accuracy)
                  + f"; A-DLP's coefficient averaged {mean(coef[ADLP.name]):.3f} over the run (the fixed one: 0.1).")
    else:
        reason = ("Shorter than the plain run by a tenth and beyond the seeds' spread: "
                  + (", ".join(n for n in shorter if shorter[n]) or "none") + "; accuracy kept within the spread: "
                  + (", ".join(n for n in kept if kept[n] and n != base) or "none") + ". The fixed penalty "
                  + ("lost accuracy" if fixed_lost else "did not lose accuracy beyond the spread")
                  + f"; A-DLP's coefficient averaged {mean(coef[ADLP.name]):.3f} over the run (the fixed one: 0.1).")
    tables = {f"held-out greedy accuracy after {STEPS} steps": accuracy,
              f"held-out greedy length after {STEPS} steps (tokens)": length,
              "training completion length, mean of the last 5 steps (tokens)": train_length,
              "length penalty coefficient, mean over the steps": coef}
    notes = ("Every run, the plain one included, is pushed to finish within the budget (a cut completion scores "
             "-0.1), so what the penalties add is the pressure below it. Without std scaling the runs learn more "
             "slowly than the demo's GRPO; the comparison is between these four, not with the demo.")
    panels = {"length/mean": "training completion length (tokens)", "eval/accuracy": "held-out greedy accuracy",
              "length/penalty_coef": "length penalty coefficient"}
    return Found(tables, verdict, reason, key, panels, notes)


if __name__ == "__main__":
    main(CLAIM, analyse)
