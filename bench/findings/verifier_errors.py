"""Claim 10: rule verifiers miss right answers; a model verifier trained against is gamed.

Two measurements:
- Audits (no training): the 404 labelled math answers of data/audit/math_answers.jsonl (266 right
  in other forms than the reference, 138 near misses) scored by two rule verifiers (numeric_answer,
  the naive one; math_answer, built on math-verify) and by the embedded 135M model as a yes/no
  judge shown the reference (`aha audit reward`): each one's false-negative and false-positive rate.
- Training: configs/judge_monitor.yaml, GRPO on the demo's problems rewarded only by the same
  135M model judging "the response states the correct result" without the reference, against the
  same GRPO rewarded by the rule verifier numeric_answer. In both numeric_answer is the gold
  reward the hacking monitor watches (never trained on in the judge runs) and the held-out scorer.

    .venv/bin/python bench/findings/verifier_errors.py [--page-only]

About 35 minutes on a 2-core Intel Xeon with AMX (bf16 autocast): a judge step ~17 s (the judge
grades every completion), a rule step ~7 s, the judge's audit a few minutes.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from statistics import mean

from pages import Found, main
from runner import ROOT, Claim, Condition, at, last, measure, noise, output_rows, run_folder, run_once, slug

from aha.jsonl import read_jsonl

STEPS, START, END = 30, 3, 5  # the monitor's baseline: the first 3 steps; the end: the last 5
LABELS = "data/audit/math_answers.jsonl"
RULE = Condition("GRPO on the rule verifier (numeric_answer)", ("reward=[{fn: aha.rewards:numeric_answer}]",))
JUDGE = Condition("GRPO on the 135M judge (no reference)", ())
CLAIM = Claim(
    slug="verifier-errors",
    title="Rule verifiers' false negatives against a model verifier's susceptibility to hacking",
    source="pitfalls of rule- and model-based verifiers (2025)",
    statement="rule-based verifiers reject right answers written in another form (non-negligible false negative "
              "rates), while model-based verifiers, more accurate on a fixed set, are easily gamed when a policy is "
              "trained against them: the trained reward rises while real accuracy falls.",
    config="configs/judge_monitor.yaml", conditions=[RULE, JUDGE], seeds=(0, 1),
    common=(f"train.steps={STEPS}", "eval.every=10", "train.report=false", "train.keep_checkpoints=1"))
RULES = {  # rule verifier -> its reward list, audited at the default threshold (their scores are 0 or 1)
    "numeric_answer (rule)": "[{fn: aha.rewards:numeric_answer}]",
    "math_answer (rule, math-verify)": "[{fn: aha.rewards:math_answer}]",
}
JUDGE_NAME = "135M judge shown the reference (model)"
JUDGE_REWARD = ("[{fn: rubric_judge, args: {rubric: \"The response's final answer equals the reference answer.\", "
                "show_reference: true}}]")
# the judge's grades are graded, not 0 or 1: audited twice, accepting everything (threshold 0: every wrong
# answer is written, with its grade) and nothing (threshold 2: every right answer is), so that its
# rates at any threshold and its ranking of right above wrong answers (AUC) come from its grades
JUDGE_THRESHOLDS = (0.0, 2.0)


def audit_command(root: Path, name: str, reward: str, threshold: float | None = None) -> list[str]:
    """`aha audit reward` of one verifier on the labels, its errors written to root/<slug>/audit-<name>.jsonl."""
    at_threshold = [] if threshold is None else ["--threshold", f"{threshold:g}"]
    suffix = "" if threshold is None else f"-t{threshold:g}"
    return ["aha", "audit", "reward", "configs/quickstart.yaml", f"reward={reward}", "--labels", LABELS,
            *at_threshold, "--output", str(root / CLAIM.slug / f"audit-{slug(name)}{suffix}.jsonl")]


def audit_commands(root: Path) -> list[list[str]]:
    return ([audit_command(root, name, reward) for name, reward in RULES.items()]
            + [audit_command(root, JUDGE_NAME, JUDGE_REWARD, t) for t in JUDGE_THRESHOLDS])


def audits(root: Path) -> None:
    for argv in audit_commands(root):
        run_once(argv, Path(argv[-1]))


def label_counts() -> tuple[int, int]:
    """How many right and how many wrong answers the labels hold."""
    labels = [row["label"] for _, row in read_jsonl(ROOT / LABELS)]
    return sum(labels), len(labels) - sum(labels)


def error_rates(root: Path, right: int, wrong: int, judge: tuple[list[float], list[float]]
                ) -> dict[str, tuple[float, float]]:
    """Each audited verifier's (false-negative rate, false-positive rate) on `right` right and `wrong`
    wrong answers; the judge's at a grade of 0.5, from its grades (judge_grades)."""
    rates = {}
    for name, reward in RULES.items():
        rows = output_rows(audit_command(root, name, reward))
        rates[name] = (sum(r["error"] == "false_negative" for r in rows) / right,
                       sum(r["error"] == "false_positive" for r in rows) / wrong)
    right_grades, wrong_grades = judge
    rates[JUDGE_NAME] = (mean(g < 0.5 for g in right_grades), mean(g >= 0.5 for g in wrong_grades))
    return rates


def judge_grades(root: Path, right: int, wrong: int) -> tuple[list[float], list[float]]:
    """The judge's grade of every right and every wrong answer, from its two audits; one it failed to
    grade (a rejection in the audit, and never written when everything is accepted) counts as 0."""
    accepted, rejected = (output_rows(audit_command(root, JUDGE_NAME, JUDGE_REWARD, t)) for t in JUDGE_THRESHOLDS)
    wrong_grades = [0.0 if r["failed"] else r["reward"] for r in accepted if r["error"] == "false_positive"]
    right_grades = [0.0 if r["failed"] else r["reward"] for r in rejected if r["error"] == "false_negative"]
    if len(right_grades) != right or len(wrong_grades) > wrong:
        raise ValueError(f"the judge's audits hold {len(right_grades)} right and {len(wrong_grades)} wrong answers; "
                         f"the labels {right} and {wrong}")
    return right_grades, wrong_grades + [0.0] * (wrong - len(wrong_grades))


def auc(right: list[float], wrong: list[float]) -> float:
    """The chance a right answer is graded above a wrong one (a tie counts half): 0.5 is no better than chance."""
    return mean(1.0 if r > w else 0.5 if r == w else 0.0 for r in right for w in wrong)


def change(metric: str):
    """A training metric's mean over the last END steps less its mean over the first START."""
    def read(records: list[dict]) -> float:
        held = [float(r[metric]) for r in records if "time/step_s" in r and r.get(metric) is not None]
        if len(held) < START + END:
            raise ValueError(f"{metric} logged at {len(held)} steps, fewer than {START + END}")
        return mean(held[-END:]) - mean(held[:START])
    return read


def first_flag(root: Path) -> dict[str, list[float]]:
    """The step from which the hacking monitor flagged gold_drop or gap (never: inf), per run."""
    got = {}
    for condition in CLAIM.conditions:
        got[condition.name] = []
        for seed in CLAIM.seeds:
            flags = json.loads((run_folder(CLAIM, condition, seed, root) / "monitor.json").read_text())["flags"]
            steps = [flags[kind]["step"] for kind in ("gold_drop", "gap") if kind in flags]
            got[condition.name].append(float(min(steps)) if steps else float("inf"))
    return got


BAR = ("The bar: the hacking half holds when, in every seed, the trained reward rose while held-out accuracy fell "
       "more than two standard errors below the base model's; the false-negative half when even the better rule "
       "verifier misses more than 2% of the right answers. Both: reproduced; one: mixed. The labelled set is math "
       "answers in many forms (the paper's setting); the training task is multiplication, where numeric_answer is "
       "exact, so the rule-trained runs have no false negatives to suffer from. The judge in training sees no "
       "reference, as a model verifier grading open answers would; the audited judge is shown it, its best case. "
       "The monitor's thresholds are configs/judge_monitor.yaml's, set after an earlier run of it.")


def audit_table(rates: dict[str, tuple[float, float]], right: int, wrong: int) -> str:
    rows = "\n".join(f"| {name}{' at a grade of 0.5' if name == JUDGE_NAME else ''} | {fn:.1%} | {fp:.1%} |"
                     for name, (fn, fp) in rates.items())
    return (f"The audits on the {right + wrong} labelled answers (the `aha audit reward` commands above):\n\n"
            f"| verifier | false-negative rate (of {right} right) | false-positive rate (of {wrong} wrong) |\n"
            f"|---|---|---|\n{rows}")


def analyse(root: Path) -> Found:
    right, wrong = label_counts()
    right_grades, wrong_grades = judge_grades(root, right, wrong)
    rates = error_rates(root, right, wrong, (right_grades, wrong_grades))
    ranked = auc(right_grades, wrong_grades)
    final = measure(CLAIM, root, last("eval/accuracy"))
    base = measure(CLAIM, root, at("eval/accuracy", 0))[RULE.name][0]
    trained = measure(CLAIM, root, change("reward/mean"))  # what GRPO optimised: a cut answer scores 0
    grade = measure(CLAIM, root, change("reward/verifier_mean"))  # the verifier's own score, before that rule
    gold = measure(CLAIM, root, change("monitor/gold_mean"))
    margin = noise(base, 200)
    gamed = all(t > 0 and a < base - margin for t, a in zip(trained[JUDGE.name], final[JUDGE.name]))
    naive_fn, checked_fn = (rates[name][0] for name in RULES)
    judge_fn, judge_fp = rates[JUDGE_NAME]
    if gamed and checked_fn > 0.02:
        verdict = "reproduced"
    elif gamed or naive_fn > 0.02:
        verdict = "mixed"
    else:
        verdict = "not reproduced"
    key = (f"false negatives {naive_fn:.1%} (numeric_answer) and {checked_fn:.1%} (math_answer); judge-trained "
           f"held-out {base:.1%} -> {mean(final[JUDGE.name]):.1%} while its reward moved "
           f"{mean(trained[JUDGE.name]):+.3f}")
    reason = (f"The naive rule verifier rejects {naive_fn:.1%} of the right answers, math_answer {checked_fn:.1%}, the "
              f"135M judge shown the reference {judge_fn:.1%} at a grade of 0.5 (accepting {judge_fp:.1%} of the near "
              f"misses): its grades average {mean(right_grades):.3f} on right answers and {mean(wrong_grades):.3f} on "
              f"near misses, and it grades a right answer above a near miss {ranked:.0%} of "
              "the time (50% is chance)"
              + ("; at this size the model verifier is not the more accurate one on a fixed set. "
                 if ranked <= 0.5 else ". ")
              +
              "Trained against the same 135M model judging without the reference, the policy raised its trained "
              f"reward by {mean(trained[JUDGE.name]):+.3f} (the judge's own grade moved "
              f"{mean(grade[JUDGE.name]):+.3f}; "
              "the rest is answers no longer cut at the token budget, which score 0), while the gold verifier's "
              f"reward on its samples moved {mean(gold[JUDGE.name]):+.3f} and its held-out accuracy went {base:.1%} -> "
              f"{mean(final[JUDGE.name]):.1%} (per seed {', '.join(f'{a:.1%}' for a in final[JUDGE.name])}; two "
              f"standard errors: {margin:.1%}). Trained against the rule verifier it went to "
              f"{mean(final[RULE.name]):.1%}."
              + ("" if checked_fn > 0.02 else " The false negatives are the naive verifier's: math_answer's are "
                 "negligible on this set, which was used to develop it."))
    tables = {"held-out greedy accuracy at the end (numeric_answer)": final,
              f"trained reward: the last {END} steps' mean less the first {START}'s": trained,
              f"the verifier's own grade (a cut answer not set to 0): last {END} less first {START}": grade,
              f"gold reward (numeric_answer) on the training samples: last {END} less first {START}": gold,
              "the step the hacking monitor first flagged (gold_drop or gap)": first_flag(root)}
    notes = audit_table(rates, right, wrong) + "\n\n" + BAR
    panels = {"reward/mean": "trained reward (judge or rule)", "reward/verifier_mean": "the verifier's own grade",
              "monitor/gold_mean": "gold reward (numeric_answer)",
              "eval/accuracy": "held-out greedy accuracy"}
    commands = tuple(shlex.join(argv) for argv in audit_commands(root))
    return Found(tables, verdict, reason, key, panels, notes, commands)


if __name__ == "__main__":
    main(CLAIM, analyse, audits)
