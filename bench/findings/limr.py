"""Claim 6: LIMR, a subset of the training prompts picked by learning impact matches or beats the full set.

The demo's multiplication problems narrowed to a in 2..30 (232 problems: 100 held out, 132 to train
on), so that a run of STEPS GRPO steps (8 prompts a step, 16 when dynamic sampling draws a second
round) covers the training prompts several times: LIMR's learning impact compares each
prompt's accuracy epoch by epoch with the mean over prompts, and needs whole epochs.
- Full set: the demo's GRPO on the 132 prompts, STEPS steps.
- LIMR subset: `aha select` on that seed's full-set run keeps the prompts whose learning impact is at
  least LIMR's 0.2; the same GRPO, the same STEPS steps, from the base model, on them alone.
Both are evaluated on the same 100 held-out problems (greedy, 32 tokens) every 10 steps; the
subset run reads them from a file `aha eval` wrote of the built-in split, so its step-0 accuracy
equals the full-set run's (the analysis checks it).

    .venv/bin/python bench/findings/limr.py [--page-only]

About 32 minutes on a 2-core Intel Xeon with AMX (bf16 autocast): ~5 s a step, 5 minutes a run.
"""

from __future__ import annotations

from pathlib import Path
from statistics import mean

from pages import Found, main
from runner import Claim, Condition, at, last, measure, noise, run_folder, slug, total

from aha.eval.selection import trajectories

STEPS, THRESHOLD = 50, 0.2
TASK = ("task.a_max=30", "task.num_eval=100")
HELD_OUT = "{root}/limr/held-out.jsonl"  # the 100 held-out problems as a task file (the base model's answers too)
FULL = Condition("full set (132 prompts)", TASK)
SUBSET = Condition(
    "LIMR subset (learning impact >= 0.2)",
    ("task.name=null", "task.data={root}/limr/subset-s{seed}.jsonl", f"task.eval_data={HELD_OUT}",
     "reward=[{fn: aha.rewards:numeric_answer}]"),
    prepare=(("aha", "eval", "configs/quickstart.yaml", *TASK, "--output", HELD_OUT),
             ("aha", "select", "{root}/limr/" + slug(FULL.name) + "-s{seed}", "--threshold", str(THRESHOLD),
              "--out", "{root}/limr/subset-s{seed}.jsonl")))
CLAIM = Claim(
    slug="limr", title="LIMR: a subset of prompts picked by learning impact against the full set",
    source="Li et al. 2025, LIMR (arXiv:2502.11886)",
    statement="a strategically selected subset of the RL training prompts (1,389 of 8,523), picked by how closely "
              "each prompt's accuracy follows the model's learning curve, matches or outperforms the full set.",
    config="configs/quickstart.yaml", conditions=[FULL, SUBSET], seeds=(0, 1, 2),
    common=(f"train.steps={STEPS}", "eval.every=10", "train.report=false", "train.keep_checkpoints=1"))


def subset_sizes(root: Path) -> list[int]:
    """How many prompts each seed's selection kept."""
    return [sum(1 for line in (root / "limr" / f"subset-s{seed}.jsonl").read_text().splitlines() if line.strip())
            for seed in CLAIM.seeds]


def analyse(root: Path) -> Found:
    final = measure(CLAIM, root, last("eval/accuracy"))
    start = measure(CLAIM, root, at("eval/accuracy", 0))
    if len(set(start[FULL.name] + start[SUBSET.name])) != 1:  # the same held-out problems, the same base model
        raise ValueError(f"the runs' step-0 held-out accuracies differ ({start}): they did not evaluate the same "
                         "problems")
    base = start[FULL.name][0]
    best = measure(CLAIM, root, lambda records: max(r["eval/accuracy"] for r in records if "eval/accuracy" in r))
    sampled = measure(CLAIM, root, total("groups/sampled"))
    sizes = subset_sizes(root)
    paths = [trajectories(run_folder(CLAIM, FULL, seed, root)) for seed in CLAIM.seeds]
    drawn = [len(p) for p in paths]
    epochs = [max(len(t) for t in p.values()) for p in paths]  # whole epochs: a last one cut short is left out
    if len(set(drawn)) != 1:
        raise ValueError(f"the full-set runs drew {drawn} distinct prompts: one task, so one number")
    prompts = drawn[0]
    margin = noise(mean(final[FULL.name]), 100)  # two standard errors of one evaluation on 100 problems
    gain = [s - f for s, f in zip(final[SUBSET.name], final[FULL.name])]
    if min(sizes) >= prompts:
        verdict = "not testable here"  # the selection kept every prompt: nothing to compare
    elif mean(gain) >= 0 and min(gain) >= -margin:
        verdict = "reproduced"
    elif mean(gain) < -margin:
        verdict = "not reproduced"
    else:
        verdict = "mixed"
    key = (f"{mean(final[SUBSET.name]):.1%} on a LIMR subset ({mean(sizes):.0f} of {prompts} prompts) vs "
           f"{mean(final[FULL.name]):.1%} on the full set, at {STEPS} steps")
    reason = (f"The base model answers {base:.1%} of the 100 held-out problems. After {STEPS} GRPO steps the full "
              f"set reached {mean(final[FULL.name]):.1%} and the LIMR subset ({', '.join(map(str, sizes))} of "
              f"{prompts} prompts by seed) {mean(final[SUBSET.name]):.1%}: {mean(gain):+.1%} (per seed "
              f"{', '.join(f'{g:+.1%}' for g in gain)}; two standard errors of one evaluation: {margin:.1%})."
              + (f" The difference is within two standard errors: at this scale {mean(sizes) / prompts:.0%} of the "
                 "prompts, picked by learning impact, match the full set; they do not beat it."
                 if abs(mean(gain)) <= margin else ""))
    tables = {"held-out greedy accuracy at the end": final,
              "the best held-out greedy accuracy at any evaluation": best,
              "prompts trained on": {FULL.name: [prompts] * len(CLAIM.seeds), SUBSET.name: sizes},
              "groups sampled in all (dynamic sampling redraws flat groups)": sampled}
    notes = ("The bar: reproduced when the subset ends at or above the full set in the mean and no seed's subset is "
             "more than two standard errors of one evaluation below its full-set run; not reproduced when the mean "
             "is more than that below; mixed otherwise. Each seed's subset comes from that seed's full-set run, as "
             "LIMR selects from a run over the full data; both conditions take the same steps and sample as many "
             "groups a step, so the subset is seen more often, not for less compute. A prompt's trajectory is its "
             "accuracy in each whole epoch of the full-set run (a last epoch cut short is left out): "
             f"{', '.join(map(str, epochs))} epochs by seed, as dynamic sampling often draws a second round of 8 "
             "prompts a step. A prompt the model solves in every epoch strays furthest from the curve and is the "
             "first left out. No random subset of the same size was trained, so this does not separate the choice of "
             f"prompts from there being fewer of them: on this task any {mean(sizes) / prompts:.0%} may do as "
             "well. The held-out file is the base model's evaluation, read back as task.eval_data: the problems and "
             "prompts are the built-in split's.")
    panels = {"eval/accuracy": "held-out greedy accuracy", "reward/mean": "training reward",
              "length/mean": "completion length (tokens)"}
    return Found(tables, verdict, reason, key, panels, notes)


if __name__ == "__main__":
    main(CLAIM, analyse)
