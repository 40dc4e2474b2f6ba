"""The `aha` command's arguments: one subcommand each for train, eval, audit, monitor, report,
bench, plan, export, select and data."""

from __future__ import annotations

import argparse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aha", description="RL post-training for language models, built around "
                                                             "rewards.")
    sub = parser.add_subparsers(dest="command", required=True)
    _train_and_measure(sub)
    _tools(sub)
    return parser


def _train_and_measure(sub) -> None:
    """train, eval, audit, monitor, report."""
    tr = sub.add_parser("train", help="train from a YAML config: method rl (GRPO family, PPO), sft, dpo or rm")
    tr.add_argument("config", help="YAML config, e.g. configs/quickstart.yaml")
    tr.add_argument("overrides", nargs="*", help="dotted overrides: train.steps=10 rollout.group_size=4")
    ev = sub.add_parser("eval", help="greedy accuracy on a task's held-out split")
    ev.add_argument("config", nargs="?", help="YAML config naming the model and task (default: built-in arithmetic)")
    ev.add_argument("overrides", nargs="*", help="dotted overrides, e.g. model=tiny eval.limit=50")
    ev.add_argument("--task", help="replaces the config's task: a built-in name (arithmetic, countdown, ...; scored by "
                    "its own verifier) or a data file of held-out {prompt, answer} problems")
    ev.add_argument("--checkpoint", help="a checkpoints/step-N folder whose weights replace the model's")
    ev.add_argument("--output", help="write per-sample results to this JSONL file")
    ev.add_argument("--samples", type=int, help="draw N samples per problem (cached) and report pass@k, maj@k, "
                                                "best-of-k")
    ev.add_argument("--search", metavar="greedy_step|beam", help="step-level search judged by eval.search_scorer (a "
                    "PRM or a verifier), beside best-of-N at an equal number of generated tokens (sets eval.search)")
    ev.add_argument("--model", action="append", dest="models", metavar="MODEL",
                    help="a model name or folder, or a checkpoints/step-N folder, evaluated instead of the config's "
                    "model; with --samples, repeat to compare")
    ev.add_argument("--out", default="runs/eval", help="with --samples: folder for the sample caches and report.json")
    ev.add_argument("--json", action="store_true", help="with --samples: print report.json; with --search: its numbers")
    au = sub.add_parser("audit", help="check a reward against labelled completions")
    au.add_argument("what", choices=["reward"], help="what to audit")
    au.add_argument("config", help="YAML config whose `reward` list is audited")
    au.add_argument("overrides", nargs="*", help="dotted overrides, e.g. \"reward=[{fn: math_answer}]\"")
    au.add_argument("--labels", required=True, help="JSONL of {completion, reference, label}, e.g. "
                                                    "data/audit/math_answers.jsonl")
    au.add_argument("--threshold", type=float, default=0.5, help="a total reward >= this counts as accepted")
    au.add_argument("--examples", type=int, default=3, help="examples of each error kind to print")
    au.add_argument("--output", help="write the false positives and negatives to this JSONL file")
    mo = sub.add_parser("monitor", help="replay a run's hacking monitor and diagnosis, e.g. with other thresholds")
    mo.add_argument("run", help="a run folder (holding config.yaml and metrics.jsonl)")
    mo.add_argument("overrides", nargs="*", help="dotted overrides, e.g. monitor.gap_threshold=0.05")
    mo.add_argument("--json", action="store_true", help="print the summary as JSON")
    rp = sub.add_parser("report", help="write a run's report.html: plots of every logged metric, monitor flags, eval "
                                       "reports")
    rp.add_argument("run", help="a run folder (holding config.yaml and metrics.jsonl)")
    rp.add_argument("--eval", action="append", default=[], metavar="DIR",
                    help="also embed this `aha eval --samples --out DIR` report (RUN/eval*/ are found by themselves)")


def _tools(sub) -> None:
    """bench, plan, export, select, data."""
    be = sub.add_parser("bench", help="time the same GRPO setting in aha and in TRL's GRPOTrainer, alternating")
    be.add_argument("config", help="YAML config of the setting, e.g. configs/quickstart.yaml")
    be.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rollout.engine=hf")
    be.add_argument("--steps", type=int, default=6, help="optimizer steps a run (the first is not counted: warm-up)")
    be.add_argument("--pairs", type=int, default=3, help="aha / TRL pairs, run one after the other")
    be.add_argument("--no-trl", action="store_true", help="time aha alone (no TRL needed)")
    be.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    pl = sub.add_parser("plan", help="forecast a config's peak memory and step time on this machine, before "
                                     "anything loads, and what to change when it will not fit")
    pl.add_argument("config", help="YAML config, e.g. configs/quickstart.yaml")
    pl.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rollout.group_size=16")
    pl.add_argument("--memory-only", action="store_true", help="skip the step time (which measures this machine's "
                    "costs once, about 10 s, then reads them from the cache)")
    pl.add_argument("--json", action="store_true", help="print every term as JSON")
    ex = sub.add_parser("export", help="write a run's checkpoint as a Hugging Face model folder (LoRA adapters merged)")
    ex.add_argument("run", help="a run folder (its newest checkpoint) or a checkpoints/step-N folder")
    ex.add_argument("out", help="the folder to write: safetensors weights, config, tokenizer and chat template")
    ex.add_argument("--checkpoint", help="which of the run's checkpoints: step-N, N or a folder (default: the newest)")
    ex.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="the weights' dtype")
    ex.add_argument("--overwrite", action="store_true", help="replace OUT when it exists and is not empty")
    se = sub.add_parser("select", help="pick an RL run's most useful training prompts for the next run (LIMR)")
    se.add_argument("run", help="an RL run folder (its groups.jsonl and config.yaml), of at least 2 epochs")
    se.add_argument("--out", required=True, help="JSONL of the selected training samples (use it as task.data)")
    se.add_argument("--threshold", type=float, default=0.2, help="the least learning impact kept (LIMR's 0.2)")
    da = sub.add_parser("data", help="write synthetic SFT, preference and process-reward data from the arithmetic "
                                     "task, or (--from-model) a model's answers to the task's prompts as SFT data")
    da.add_argument("config", nargs="?", help="YAML config whose `task` section is used (default: built-in arithmetic)")
    da.add_argument("overrides", nargs="*", help="dotted overrides, e.g. task.a_max=60")
    da.add_argument("--out", required=True, help="folder for the JSONL files")
    da.add_argument("--seed", type=int, default=0, help="seed of the synthetic completions (the split is task.seed's)")
    da.add_argument("--max-per-file", type=int, help="lines per file (default: 400 per train file, 200 per eval file)")
    da.add_argument("--from-model", metavar="MODEL", help="off-policy distillation: sample MODEL (a folder, a "
                    "checkpoints/step-N, smollm2-135m) on the task's training prompts and write its completions as SFT "
                    "data, OUT/teacher_sft.jsonl (for sft.data), instead of the synthetic files")
    da.add_argument("--per-prompt", type=int, default=1, help="with --from-model: completions sampled per prompt")
    da.add_argument("--verified-only", action="store_true", help="with --from-model: keep only completions with the "
                    "full score of eval.scorer (by default the config's reward >= eval.correct_threshold)")
    da.add_argument("--limit", type=int, help="with --from-model: sample only the first N training prompts")
    da.add_argument("--judge-from", metavar="PAIRS", help="a preference JSONL (prompt, chosen, rejected) as A/B judge "
                    "prompts, each pair in both orders, answers A or B: OUT/judge_<name>.jsonl, to train a pairwise "
                    "judge by RL with fn: multiple_choice")
