"""Claim 13: a confidence (Brier) reward restores the calibration a binary reward loses (RLCR).

The demo's multiplication problems, with a system prompt and three worked examples (few-shot
turns) that end each answer with a stated confidence, <confidence>0.7</confidence>: without them
the embedded model never states one (0 of 32 greedy answers with the system prompt alone), and a
missing confidence scores the worst Brier score in every completion alike, which teaches nothing.
Two trainings, 10 GRPO steps each, the same prompts and settings: the demo's binary reward
(numeric_answer, which reads the answer without the confidence) and RLCR's (right + Brier score
of the stated confidence, `fn: calibration`). Then every model, the base one included, answers the 200 held-out problems
greedily (`aha eval ... --output`), and each answer's correctness and stated confidence give the
accuracy, the expected calibration error (10 bins, answers that state a confidence) and the Brier
score (a missing confidence counted as the worst, as the reward counts it).

    .venv/bin/python bench/findings/calibration_reward.py [--page-only]

About 53 minutes on a 2-core AVX2 EPYC (fp32): each run ~45 s a step (the worked examples make
the prompts long), then ~1.5 minutes an evaluation. Ten steps, not the demo's twenty, to stay
within the hour a claim may take.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from statistics import mean

from pages import Found, main
from runner import Claim, Condition, eval_command, eval_commands, noise, output_rows, run_evals

from aha.eval.estimators import expected_calibration_error
from aha.rewards import stated_confidence

STEPS = 10
SHOTS = ("[{prompt: 'What is 12 * 3?', answer: '12 * 3 = 36 <confidence>0.9</confidence>'}, "
         "{prompt: 'What is 47 * 8?', answer: '47 * 8 = 376 <confidence>0.6</confidence>'}, "
         "{prompt: 'What is 29 * 6?', answer: '29 * 6 = 164 <confidence>0.3</confidence>'}]")  # 164: wrong, unsure
ASKED = ("task.system_prompt=Answer with the number, then say how sure you are, from 0 to 1, as "
         "<confidence>0.7</confidence>.", f"task.few_shot={SHOTS}", "rollout.max_new_tokens=32",
         "eval.max_new_tokens=32")
BINARY = Condition("GRPO, binary reward", ())  # the demo's numeric_answer
RLCR = Condition("GRPO, RLCR reward (right + Brier)", ("reward=[{fn: calibration, args: {verifier: numeric_answer}}]",))
CLAIM = Claim(
    slug="calibration-reward", title="A confidence (Brier) reward against a binary reward: calibration after RL",
    source="Damani et al. 2025, RLCR (arXiv:2507.16806)",
    statement="binary-reward RL degrades calibration; adding a Brier score of a stated confidence (RLCR) improves "
              "calibration with no loss in accuracy.",
    config="configs/quickstart.yaml", conditions=[BINARY, RLCR], seeds=(0, 1),
    # held-out accuracy only after training: the evaluations after it (with each answer) measure the claim
    common=(*ASKED, f"train.steps={STEPS}", "eval.before=false", "train.report=false", "train.keep_checkpoints=1"))
LABEL = "greedy"
STATED_MIN = 0.5  # below this share of answers stating a confidence, the base model cannot be measured


def calibration(argv: list[str]) -> dict[str, float]:
    """One evaluation's accuracy, share of answers stating a confidence, their mean confidence,
    the ECE over those, and the Brier score with a missing confidence counted as the worst."""
    rows = output_rows(argv)
    right = [float(r["score"]) for r in rows]
    stated = [stated_confidence(r["completion"]) for r in rows]
    said = [(q, c) for q, c in zip(stated, right) if q is not None]
    worst = [(1.0 - c if q is None else q, c) for q, c in zip(stated, right)]
    return {"accuracy": mean(right), "stated": len(said) / len(rows), "n": len(rows),
            "distinct": len({q for q, _ in said}),
            "confidence": mean(q for q, _ in said) if said else float("nan"),
            "ece": expected_calibration_error(*zip(*said)) if said else float("nan"),
            "brier": mean((q - c) ** 2 for q, c in worst)}


def verdict_of(base: dict, got: dict[str, list[dict]]) -> str:
    ece = {name: [e["ece"] for e in runs] for name, runs in got.items()}
    accuracy = {name: [e["accuracy"] for e in runs] for name, runs in got.items()}
    if base["stated"] < STATED_MIN or min(e["stated"] for runs in got.values() for e in runs) < STATED_MIN:
        return "not testable here"
    hurt = mean(ece[BINARY.name]) > base["ece"]
    restored = max(ece[RLCR.name]) < min(ece[BINARY.name]) and mean(ece[RLCR.name]) < base["ece"]
    kept = mean(accuracy[RLCR.name]) >= mean(accuracy[BINARY.name]) - noise(mean(accuracy[BINARY.name]), base["n"])
    if hurt and restored and kept:
        return "reproduced"
    if mean(ece[RLCR.name]) >= mean(ece[BINARY.name]):
        return "not reproduced"
    return "mixed"


def analyse(root: Path) -> Found:
    base = calibration(eval_command(CLAIM, root, STEPS, LABEL, extra=ASKED))
    got = {c.name: [calibration(eval_command(CLAIM, root, STEPS, LABEL, c, s, ASKED)) for s in CLAIM.seeds]
           for c in CLAIM.conditions}

    def column(key: str) -> dict[str, list[float]]:
        return {name: [e[key] for e in runs] for name, runs in got.items()}
    ece, accuracy, brier, confidence, stated = (column(k) for k in ("ece", "accuracy", "brier", "confidence",
                                                                     "stated"))
    verdict = verdict_of(base, got)
    key = (f"ECE {mean(ece[BINARY.name]):.3f} (binary) vs {mean(ece[RLCR.name]):.3f} (RLCR), base {base['ece']:.3f}; "
           f"accuracy {mean(accuracy[BINARY.name]):.1%} vs {mean(accuracy[RLCR.name]):.1%}")
    margin = noise(mean(accuracy[BINARY.name]), base["n"])
    reason = (f"The base model answers {base['accuracy']:.1%} right, states a confidence in {base['stated']:.0%} of "
              f"its answers (mean {base['confidence']:.2f}): ECE {base['ece']:.3f}, Brier {base['brier']:.3f}. After "
              f"binary-reward RL: accuracy {mean(accuracy[BINARY.name]):.1%}, mean confidence "
              f"{mean(confidence[BINARY.name]):.2f}, ECE {mean(ece[BINARY.name]):.3f} (per seed "
              f"{', '.join(f'{v:.3f}' for v in ece[BINARY.name])}). After RLCR: accuracy "
              f"{mean(accuracy[RLCR.name]):.1%}, mean confidence {mean(confidence[RLCR.name]):.2f}, ECE "
              f"{mean(ece[RLCR.name]):.3f} (per seed {', '.join(f'{v:.3f}' for v in ece[RLCR.name])}). Two standard "
              f"errors of one evaluation's accuracy: {margin:.1%}.")
    tables = {f"expected calibration error, 10 bins (base model: {base['ece']:.3f})": ece,
              f"Brier score, a missing confidence counted as the worst (base model: {base['brier']:.3f})": brier,
              f"held-out greedy accuracy (base model: {base['accuracy']:.3f})": accuracy,
              f"mean stated confidence (base model: {base['confidence']:.3f})": confidence,
              f"answers stating a confidence (base model: {base['stated']:.3f})": stated}
    commands = tuple(shlex.join(argv) for argv in eval_commands(CLAIM, root, STEPS, LABEL, ASKED))
    notes = (f"Every number is a greedy answer to each of the {base['n']} held-out problems; the base model's is "
             "one pass (no seed to vary). Correctness is the demo's scorer, numeric_answer, which cuts the "
             "<confidence> span out before it reads the answer (as the calibration reward's check does). The bar: "
             "binary RL's mean ECE above the base model's, every RLCR seed's ECE below every binary seed's and "
             "RLCR's mean below the base model's, and RLCR's accuracy no more than two standard errors below "
             "binary's. The third worked example's answer is wrong (29 * 6 = 174) and says 0.3: the examples show "
             "a confidence that varies, not a constant to copy.")
    below = [name for name, values in accuracy.items() if mean(values) < base["accuracy"]]
    if below:  # the setting's limit: the few-shot turns already lift the base model, and 10 steps may lose it
        notes += (f" After training, held-out accuracy fell below the base model's {base['accuracy']:.1%} in "
                  + " and ".join(below) + ": the worked examples alone lift the base model far above the demo's "
                  "12% (its prompts have none), and what RL does here is measured against that.")
    notes += (" Distinct confidences stated over the held-out answers: base model "
              f"{base['distinct']:.0f}; " + "; ".join(f"{name} " + ", ".join(f"{e['distinct']:.0f}" for e in runs)
                                                   for name, runs in got.items()) + " (per seed).")
    panels = {"eval/accuracy": "held-out accuracy during training", "reward/mean": "training reward (RLCR's: right "
              "+ Brier, in [-1, 1])", "length/mean": "completion length (tokens)"}
    return Found(tables, verdict, reason, key, panels, notes, commands)


if __name__ == "__main__":
    main(CLAIM, analyse, lambda root: run_evals(eval_commands(CLAIM, root, STEPS, LABEL, ASKED)))
