"""Claim 7: an SFT warm start against RL alone at equal wall time, and SFT then RL.

Three trainings of the embedded model on the demo's multiplication problems, each seed on its own:
- GRPO alone: the demo (configs/quickstart.yaml), 20 steps from the base model;
- SFT alone: one pass over the 272 committed worked answers (configs/sft_arithmetic.yaml, 17 steps);
- SFT then GRPO: the demo's GRPO for 10 steps from that seed's SFT checkpoint, with a 48-token
  training budget: a third of the worked answers are longer than the demo's 16 tokens, and a cut
  answer scores 0, which would train the worked form away (methods.md measured that once).
10 steps so that SFT and its GRPO together take about GRPO alone's 20 (its steps are longer). Wall
time is the training steps' own time (time/step_s), evaluations left out. Held-out greedy accuracy
on the 200 problems every 5 GRPO steps and after SFT; the runs are compared where their
wall times meet, reading each run's accuracy between its evaluations linearly.

    .venv/bin/python bench/findings/sft_then_rl.py [--page-only]

About 48 minutes on a 2-core AVX2 EPYC (fp32): the demo's GRPO ~18 s a step (16 tokens), SFT
~10 s a step, GRPO after SFT ~52 s a step (48 tokens, longer answers), ~1 minute an evaluation.
"""

from __future__ import annotations

from pathlib import Path
from statistics import mean

from pages import Found, main, new_figure, save_figure
from runner import Claim, Condition, at, last, measure, noise, read_metrics, run_folder

SFT_STEPS, THEN_STEPS, RL_STEPS = 17, 10, 20
RL = Condition("GRPO alone (the demo)", (f"train.steps={RL_STEPS}", "eval.every=5"))
SFT = Condition("SFT alone (one pass)", ("eval.before=false",), config="configs/sft_arithmetic.yaml")
THEN = Condition("SFT, then GRPO (48 tokens)", (
    "model={root}/sft-then-rl/sft-alone-one-pass-s{seed}/checkpoints/step-" + str(SFT_STEPS),
    "rollout.max_new_tokens=48", f"train.steps={THEN_STEPS}", "eval.before=false", "eval.every=5"))
CLAIM = Claim(
    slug="sft-then-rl", title="An SFT warm start against RL alone at equal wall time, and SFT then RL",
    source="DeepSeek-AI 2025, DeepSeek-R1 (arXiv:2501.12948)",
    statement="for a small model, supervised fine-tuning on good answers (distillation) does better than RL "
              "alone at the same compute, and RL after that warm start improves on it further.",
    config="configs/quickstart.yaml", conditions=[RL, SFT, THEN], seeds=(0, 1),
    common=("train.report=false", "train.keep_checkpoints=1"))


def timeline(records: list[dict], start: float = 0.0) -> list[tuple[float, float]]:
    """(minutes of training so far, held-out accuracy) at each evaluation of a run, its training
    steps' time (time/step_s) summed up to the evaluated step; start: minutes spent before it."""
    spent, points = start, []
    for r in records:
        if "time/step_s" in r:
            spent += r["time/step_s"] / 60
        elif "eval/accuracy" in r:
            points.append((spent, float(r["eval/accuracy"])))
    return points


def accuracy_at(points: list[tuple[float, float]], minutes: float) -> float:
    """A run's held-out accuracy at a wall time, linear between its evaluations (its last one after it)."""
    for (t0, a0), (t1, a1) in zip(points, points[1:]):
        if t0 <= minutes <= t1:
            return a0 if t1 == t0 else a0 + (a1 - a0) * (minutes - t0) / (t1 - t0)
    return points[-1][1] if minutes >= points[-1][0] else points[0][1]


def timelines(root: Path) -> dict[str, list[list[tuple[float, float]]]]:
    """Each condition's timeline per seed; SFT alone starts at the base model (GRPO alone's step 0)
    and SFT then GRPO at the end of its SFT run."""
    got = {c.name: [] for c in CLAIM.conditions}
    for seed in CLAIM.seeds:
        rl = timeline(read_metrics(run_folder(CLAIM, RL, seed, root)))
        sft = [rl[0]] + timeline(read_metrics(run_folder(CLAIM, SFT, seed, root)))
        then = timeline(read_metrics(run_folder(CLAIM, THEN, seed, root)), start=sft[-1][0])
        got[RL.name].append(rl)
        got[SFT.name].append(sft)
        got[THEN.name].append([sft[-1]] + then)
    return got


def plot(lines: dict[str, list[list[tuple[float, float]]]]):
    def draw(path: Path) -> None:
        fig, ax = new_figure(figsize=(6, 3.8))
        for (name, runs), color in zip(lines.items(), ("C0", "C1", "C2")):
            for i, run in enumerate(runs):
                ax.plot(*zip(*run), marker="o", color=color, alpha=1.0 if i == 0 else 0.5,
                        linestyle="-" if i == 0 else "--", label=f"{name}, seed {CLAIM.seeds[i]}")
        ax.set_xlabel("minutes of training (evaluations left out)")
        ax.set_ylabel("held-out greedy accuracy")
        ax.legend(fontsize=7)
        save_figure(fig, path)
    return draw


def analyse(root: Path) -> Found:
    final = measure(CLAIM, root, last("eval/accuracy"))
    base = at("eval/accuracy", 0)(read_metrics(run_folder(CLAIM, RL, CLAIM.seeds[0], root)))  # before any training
    length = measure(CLAIM, root, last("eval/length"))
    lines = timelines(root)
    minutes = {name: [run[-1][0] for run in runs] for name, runs in lines.items()}
    # equal wall time: SFT alone against GRPO alone at SFT's minutes; SFT then GRPO against GRPO
    # alone where both have run (the shorter of the two), seed by seed
    rl_at_sft = [accuracy_at(rl, t) for rl, t in zip(lines[RL.name], minutes[SFT.name])]
    meet = [min(a, b) for a, b in zip(minutes[RL.name], minutes[THEN.name])]
    rl_at_meet = [accuracy_at(rl, t) for rl, t in zip(lines[RL.name], meet)]
    then_at_meet = [accuracy_at(run, t) for run, t in zip(lines[THEN.name], meet)]
    margin = noise(mean(final[RL.name]), 200)
    warm_gain = mean(then_at_meet) - mean(rl_at_meet)
    rl_after_sft = mean(final[THEN.name]) - mean(final[SFT.name])
    if warm_gain > margin and rl_after_sft > 0:
        verdict = "reproduced"
    elif warm_gain <= 0:
        verdict = "not reproduced"
    else:
        verdict = "mixed"
    key = (f"{mean(then_at_meet):.1%} SFT then GRPO vs {mean(rl_at_meet):.1%} GRPO alone at {mean(meet):.1f} min; "
           f"SFT alone {mean(final[SFT.name]):.1%} in {mean(minutes[SFT.name]):.1f} min")
    reason = (f"The base model answers {base:.1%} of the held-out problems. At equal wall time "
              f"({mean(meet):.1f} minutes, the shorter of the two runs, seed by seed), SFT then GRPO held "
              f"{mean(then_at_meet):.1%} against GRPO alone's {mean(rl_at_meet):.1%} ({warm_gain:+.1%}; two standard "
              f"errors of one evaluation: {margin:.1%}). SFT alone reached {mean(final[SFT.name]):.1%} in "
              f"{mean(minutes[SFT.name]):.1f} minutes, where GRPO alone stood at {mean(rl_at_sft):.1%}; "
              f"GRPO after SFT moved it {rl_after_sft:+.1%} (to {mean(final[THEN.name]):.1%}). "
              + ("Both differences are within two standard errors: the warm start's edge points the claim's way, "
                 "RL after SFT the other way." if abs(warm_gain) <= margin and abs(rl_after_sft) <= margin
                 else ""))
    best = measure(CLAIM, root, lambda records: max(r["eval/accuracy"] for r in records if "eval/accuracy" in r))
    tables = {"held-out greedy accuracy at the end of the run": final,
              "the best held-out greedy accuracy at any of the run's evaluations": best,
              "minutes of training (SFT then GRPO: its SFT run's included)": minutes,
              "held-out greedy length at the end (tokens)": length,
              "at equal wall time: held-out accuracy at the SFT run's minutes (GRPO alone read from its curve)": {
                  RL.name: rl_at_sft, SFT.name: final[SFT.name]},
              "at equal wall time: held-out accuracy where GRPO alone and SFT then GRPO meet (the shorter)": {
                  RL.name: rl_at_meet, THEN.name: then_at_meet}}
    notes = ("The bar: reproduced when SFT then GRPO beats GRPO alone at equal wall time by more than two standard "
             "errors of one evaluation on 200 problems and GRPO after SFT ends above SFT alone; not reproduced when "
             "the warm start is no better than GRPO alone; mixed otherwise. The SFT data is 272 worked answers "
             "written by the task's own generator and checked by its verifier (data/synthetic/arithmetic/): a "
             "perfect teacher, which is the distillation setting the claim is about. A run's accuracy between two "
             "of its evaluations is read off the straight line between them. Minutes are this CPU's: another CPU "
             "moves the meeting point, not the order of the runs' steps. GRPO with the 48-token budget after SFT "
             f"takes longer steps than the demo's (its completions are longer, {mean(length[THEN.name]):.0f} tokens "
             f"against {mean(length[RL.name]):.0f}), so where the two meet it has run only part of its "
             f"{THEN_STEPS} steps. The greedy length after SFT differs between seeds: the worked form "
             "(\"50 * 5 = 250 and 1 * 5 = 5, so 51 * 5 = 255.\") is a third of the SFT answers, and a seed's "
             "order of them decides whether its model answers that way or in one line.")
    return Found(tables, verdict, reason, key, {}, notes, plot=plot(lines))


if __name__ == "__main__":
    main(CLAIM, analyse)
