"""The `aha` command: train, eval, audit, monitor, report, bench, export, select, data."""

from __future__ import annotations

import argparse
import os
import sys


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aha", description="RL post-training for language models, built around rewards.")
    sub = parser.add_subparsers(dest="command", required=True)
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
    ev.add_argument("--samples", type=int, help="draw N samples per problem (cached) and report pass@k, maj@k, best-of-k")
    ev.add_argument("--model", action="append", dest="models", metavar="MODEL",
                    help="a model name or folder, or a checkpoints/step-N folder, evaluated instead of the config's "
                    "model; with --samples, repeat to compare")
    ev.add_argument("--out", default="runs/eval", help="with --samples: folder for the sample caches and report.json")
    ev.add_argument("--json", action="store_true", help="with --samples: print report.json")
    au = sub.add_parser("audit", help="check a reward against labelled completions")
    au.add_argument("what", choices=["reward"], help="what to audit")
    au.add_argument("config", help="YAML config whose `reward` list is audited")
    au.add_argument("overrides", nargs="*", help="dotted overrides, e.g. \"reward=[{fn: math_answer}]\"")
    au.add_argument("--labels", required=True, help="JSONL of {completion, reference, label}, e.g. data/audit/math_answers.jsonl")
    au.add_argument("--threshold", type=float, default=0.5, help="a total reward >= this counts as accepted")
    au.add_argument("--examples", type=int, default=3, help="examples of each error kind to print")
    au.add_argument("--output", help="write the false positives and negatives to this JSONL file")
    mo = sub.add_parser("monitor", help="replay a run's hacking monitor, e.g. with other thresholds")
    mo.add_argument("run", help="a run folder (holding config.yaml and metrics.jsonl)")
    mo.add_argument("overrides", nargs="*", help="dotted overrides, e.g. monitor.gap_threshold=0.05")
    mo.add_argument("--json", action="store_true", help="print the summary as JSON")
    rp = sub.add_parser("report", help="write a run's report.html: plots of every logged metric, monitor flags, eval reports")
    rp.add_argument("run", help="a run folder (holding config.yaml and metrics.jsonl)")
    rp.add_argument("--eval", action="append", default=[], metavar="DIR",
                    help="also embed this `aha eval --samples --out DIR` report (RUN/eval*/ are found by themselves)")
    be = sub.add_parser("bench", help="time the same GRPO setting in aha and in TRL's GRPOTrainer, alternating")
    be.add_argument("config", help="YAML config of the setting, e.g. configs/quickstart.yaml")
    be.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rollout.engine=hf")
    be.add_argument("--steps", type=int, default=6, help="optimizer steps a run (the first is not counted: warm-up)")
    be.add_argument("--pairs", type=int, default=3, help="aha / TRL pairs, run one after the other")
    be.add_argument("--no-trl", action="store_true", help="time aha alone (no TRL needed)")
    be.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
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
    da = sub.add_parser("data", help="write synthetic SFT, preference and process-reward data from the arithmetic task")
    da.add_argument("config", nargs="?", help="YAML config whose `task` section is used (default: built-in arithmetic)")
    da.add_argument("overrides", nargs="*", help="dotted overrides, e.g. task.a_max=60")
    da.add_argument("--out", required=True, help="folder for the JSONL files")
    da.add_argument("--seed", type=int, default=0, help="seed of the synthetic completions (the split is task.seed's)")
    da.add_argument("--max-per-file", type=int, help="lines per file (default: 400 per train file, 200 per eval file)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.command == "eval" and not args.samples and args.models:
        if len(args.models) > 1:
            parser.error("comparing models (--model given more than once) needs --samples N")
        if args.checkpoint:
            parser.error("give --model or --checkpoint, not both: --checkpoint puts its weights into the config's model")
    # after argparse: --help stays instant; torch and transformers load in ~5 s
    from aha.config import ConfigError, load_config
    from aha.envs import EnvError
    from aha.eval.sampling import CacheMismatch
    from aha.models.compute import retain_freed_memory
    from aha.rewards import RewardError
    from aha.tasks import TaskError
    from aha.tracking.run_dir import RunWriteError
    from aha.tracking.run_report import RunReportError

    retain_freed_memory()
    try:
        if args.command == "monitor":
            return _monitor(args)
        if args.command == "report":
            from aha.tracking.run_report import write_run_report

            print(f"report: {write_run_report(args.run, args.eval)}")
            return 0
        if args.command == "data":
            return _data(args)
        if args.command == "select":
            from aha.eval.selection import select_prompts

            found = select_prompts(args.run, args.out, args.threshold)
            print(f"selected {found['selected']} of {found['scored']} prompts scored over {found['epochs']} epochs "
                  f"({found['drawn']} drawn) at learning impact >= {args.threshold}: {args.out}")
            return 0
        if args.command == "export":
            from aha.models.export import export

            try:
                print(f"exported to {export(args.run, args.out, args.checkpoint, args.dtype, args.overwrite)}")
            except ValueError as err:  # an adapter that does not fit, an output inside the run
                print(f"aha: error: {err}", file=sys.stderr)
                return 2
            return 0
        if args.command == "bench":
            from aha.perf.bench import bench

            if args.steps < 2 or args.pairs < 1:
                parser.error("--steps must be at least 2 (the first is warm-up) and --pairs at least 1")
            import json
            from pathlib import Path

            try:
                result = bench(args.config, args.overrides, args.steps, args.pairs, not args.no_trl)
            except ValueError as err:  # a setting TRL's side would not reproduce
                print(f"aha: error: {err}", file=sys.stderr)
                return 2
            if args.json:
                Path(args.json).write_text(json.dumps(result, indent=1))
            return 0
        if args.command == "eval" and args.config and "=" in args.config and not os.path.exists(args.config):
            args.config, args.overrides = None, [args.config, *args.overrides]  # no config, only overrides
        config = load_config(args.config, args.overrides + _task_override(getattr(args, "task", None)))
        if args.command == "train":
            from aha.training.loop import train

            train(config)
        elif args.command == "audit":
            _audit(config, args)
        elif args.samples:
            _eval_samples(config, args)
        else:
            _eval(config, args.checkpoint, (args.models or [None])[0], args.output)
    except (ConfigError, TaskError, RewardError, EnvError, FileNotFoundError, FileExistsError, CacheMismatch,
            RunReportError, RunWriteError) as err:  # ModelNotFound is one
        print(f"aha: error: {err}", file=sys.stderr)
        return 2
    return 0


def _task_override(task: str | None) -> list[str]:
    """--task T as a dotted override of the whole task section (JSON is YAML)."""
    import json
    from pathlib import Path

    if task is None:
        return []
    if task.endswith(".jsonl") or Path(task).is_file():  # eval reads only the held-out split
        return ["task=" + json.dumps({"data": task, "eval_data": task})]
    from aha.config import BUILT_IN_TASKS

    # a built-in task is scored by its own verifier, whatever reward the config trains with
    # (Countdown scored by numeric_answer would count its bare target as right)
    scorer = [f"eval.scorer={BUILT_IN_TASKS[task]}"] if task in BUILT_IN_TASKS else []
    return ["task=" + json.dumps({"name": task}), *scorer]


def _data(args) -> int:
    """`aha data`: only the config's task section matters; the files and a summary of them."""
    from aha.config import load_config
    from aha.tasks.synthetic import describe, write_synthetic

    if args.config and "=" in args.config and not os.path.exists(args.config):
        args.config, args.overrides = None, [args.config, *args.overrides]  # no config, only overrides
    config = load_config(args.config, args.overrides)
    files = write_synthetic(config.task, args.out, args.seed, args.max_per_file)
    print(describe(files))
    print(f"wrote {len(files)} files to {args.out}")
    return 0


def _monitor(args) -> int:
    import json
    from pathlib import Path

    from aha.config import load_config
    from aha.tracking import RunDir
    from aha.training.monitor import format_flags, replay_monitor

    folder = Path(args.run)
    if not (folder / "config.yaml").is_file() or not (folder / "metrics.jsonl").is_file():
        raise FileNotFoundError(f"{folder} is not a run folder (no config.yaml and metrics.jsonl)")
    config = load_config(folder / "config.yaml", args.overrides)
    monitor = replay_monitor(config.monitor, RunDir(folder).read_metrics())
    print(json.dumps(monitor.summary(), indent=1) if args.json else format_flags(monitor))
    return 0


def _eval_samples(config, args) -> None:
    import json
    from pathlib import Path

    from aha.eval.study import run_study

    if args.samples < 1:
        raise ValueError("--samples must be at least 1")
    if config.env.name is not None:  # the study samples single answers; episodes are aha eval's greedy ones
        print(f"note: env.name={config.env.name}: --samples draws single answers to each problem (first turns); "
              "`aha eval` without --samples plays greedy episodes")
    report = run_study(config, args.models or [config.model], args.samples, Path(args.out))
    if args.json:
        print(json.dumps(report, indent=1))
        return
    for label, summary in report["models"].items():
        curve = summary["curves"]["pass@k"]
        points = ", ".join(f"pass@{k} {m:.1%}" for k, m in zip(curve["k"], curve["mean"]) if k in (1, curve["k"][-1]))
        maj = summary["curves"].get("maj@k")
        voting = f"maj@{curve['k'][-1]} {maj['mean'][-1]:.1%}" if maj else f"maj@{curve['k'][-1]} not computable"
        print(f"{label}: {summary['problems']} problems x {summary['samples_per_problem']} samples: {points}, "
              f"{voting}, mean length {summary['length']['mean']:.1f}")
        for metric, why in summary.get("not_computable", {}).items():
            print(f"  {metric} not computable: {why}")
    comparison = report["comparison"]
    if comparison:
        cov = comparison["coverage"]
        a, b = comparison["models"]
        print(f"solved at any k: both {len(cov['both'])}, only {a} {len(cov['only_a'])}, only {b} {len(cov['only_b'])}, "
              f"neither {len(cov['neither'])}")
        crossings = comparison["pass@k_crossings"]
        print("pass@k curves cross between k = " + "; ".join(f"{c['between_k'][0]} and {c['between_k'][1]}" for c in crossings)
              if crossings else "pass@k curves do not cross")
    print(f"report: {Path(args.out) / 'report.html'} (numbers: report.json)")


def _eval(config, checkpoint: str | None, model: str | None, output: str | None) -> None:
    """Greedy held-out accuracy of the config's model, of that model with a checkpoint's
    weights (--checkpoint), or of another model or checkpoint folder (--model)."""
    import json
    from pathlib import Path

    from aha.eval import evaluate
    from aha.eval.scoring import build_scorer, held_out_name
    from aha.eval.study import load_for_eval
    from aha.models import load
    from aha.rollout import build_engine
    from aha.tasks import build_task
    from aha.models.checkpoints import load_weights
    from aha.models.compute import resolve_dtype

    task = build_task(config.task, config.base_dir)
    scorer = build_scorer(config)  # before the model loads: a bad eval.scorer fails in a second
    env_reward = env = None
    try:
        if config.env.name is not None:  # multi-turn episodes: the environment judges with the run's reward
            from aha.envs import build_environment
            from aha.rewards import build_reward

            env_reward = build_reward(config.reward, config.base_dir, dtype=config.train.dtype)
            env = build_environment(config.env, env_reward, config.base_dir)
        loaded = load_for_eval(model, config) if model else load(config.model, seed=config.seed)
        if checkpoint:
            load_weights(loaded.model, Path(checkpoint))
        engine = build_engine(config.rollout, loaded.model, loaded.tokenizer, resolve_dtype(config.train.dtype),
                              seed=config.seed)
        try:
            result = evaluate(engine, task, scorer, config.eval.limit, config.eval.max_new_tokens, env=env)
        finally:
            engine.close()
    finally:
        scorer.close()
        if env_reward is not None:
            env_reward.close()
    if output:
        Path(output).write_text("".join(json.dumps(r) + "\n" for r in result.samples))
    source = checkpoint or model or loaded.name
    print(f"{source} on {held_out_name(config, task.name)}: held-out greedy accuracy {result.accuracy:.1%} "
          f"({result.n} problems; right: {scorer.describe})")
    if result.metrics:  # multi-turn episodes
        print(f"  {config.env.name} episodes of up to {config.env.max_turns} turns: first-turn accuracy "
              f"{result.metrics['eval/first_turn_accuracy']:.1%}, final {result.accuracy:.1%}, "
              f"mean turns {result.metrics['eval/turns']:.2f}, mean return {result.metrics['eval/return']:.3f}")


def _audit(config, args) -> None:
    import json
    from pathlib import Path

    from aha.rewards import build_reward
    from aha.rewards.audit import audit_reward, format_audit, load_labels

    reward = build_reward(config.reward, config.base_dir, dtype=config.train.dtype)
    result = audit_reward(reward, load_labels(args.labels), args.threshold)
    print(format_audit(result, reward.formula(), args.examples))
    if args.output:
        rows = [{"error": "false_positive", **r} for r in result.false_positives]
        rows += [{"error": "false_negative", **r} for r in result.false_negatives]
        Path(args.output).write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
