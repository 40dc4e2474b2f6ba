"""What each `aha` command does (its arguments: cli/parser.py). Each takes the parsed arguments;
the commands that need no config return the exit status."""

from __future__ import annotations

import os
import sys


def with_config(args) -> int:
    """train, audit and eval: the config (with --task as an override of its task section) first.
    Returns the exit status."""
    from aha.config import load_config

    search = [f"eval.search={args.search}"] if getattr(args, "search", None) else []  # aha eval --search X
    config = load_config(args.config, args.overrides + task_override(getattr(args, "task", None)) + search)
    if args.command == "plan":
        return plan(config, args)
    if args.command == "train":
        from aha.cli.learners import train_on_ranks
        from aha.perf.fit import check_before_training

        check_before_training(config)  # train.memory_check: a run forecast over the machine's memory stops here
        return train_on_ranks(config, args.argv)
    if args.command == "audit":
        audit(config, args)
    elif config.eval.search != "none":
        eval_search(config, args)
    elif args.samples:
        eval_samples(config, args)
    else:
        eval_greedy(config, args.checkpoint, (args.models or [None])[0], args.output)
    return 0


def report(args) -> int:
    from aha.tracking.run_report import write_run_report

    print(f"report: {write_run_report(args.run, args.eval)}")
    return 0


def select(args) -> int:
    from aha.eval.selection import select_prompts

    found = select_prompts(args.run, args.out, args.threshold)
    print(f"selected {found['selected']} of {found['scored']} prompts scored over {found['epochs']} epochs "
          f"({found['drawn']} drawn) at learning impact >= {args.threshold}: {args.out}")
    return 0


def export(args) -> int:
    from aha.models.export import export as export_checkpoint

    try:
        print(f"exported to {export_checkpoint(args.run, args.out, args.checkpoint, args.dtype, args.overwrite)}")
    except ValueError as err:  # an adapter that does not fit, an output inside the run
        print(f"aha: error: {err}", file=sys.stderr)
        return 2
    return 0


def bench(args) -> int:
    import json
    from pathlib import Path

    from aha.perf.bench import bench as run_bench

    try:
        result = run_bench(args.config, args.overrides, args.steps, args.pairs, not args.no_trl)
    except ValueError as err:  # a setting TRL's side would not reproduce
        print(f"aha: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def plan(config, args) -> int:
    """`aha plan`: the forecast's table and verdict (perf/fit.py); exit status 1 when it will
    not fit in this machine's memory."""
    import json
    from dataclasses import asdict

    from aha.perf.fit import make_plan, plan_report

    found = make_plan(config, with_time=not args.memory_only)
    if args.json:
        f = found.forecast
        print(json.dumps({"peak_bytes": f.peak_bytes, "step_seconds": f.step_seconds, "seconds": f.seconds,
                          "terms": [asdict(t) for t in f.terms], "notes": f.notes, "total_bytes": found.total,
                          "available_bytes": found.available, "fitting": found.fitting}, indent=1))
    else:
        print(plan_report(found))
    return 1 if found.total and found.forecast.peak_bytes > found.total else 0


def task_override(task: str | None) -> list[str]:
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


def data(args) -> int:
    """`aha data`: only the config's task section matters; the files and a summary of them. With
    --from-model, the model's answers to the task's training prompts (eval/distill_data.py)."""
    from aha.config import load_config
    from aha.tasks.synthetic import describe, write_synthetic

    if args.config and "=" in args.config and not os.path.exists(args.config):
        args.config, args.overrides = None, [args.config, *args.overrides]  # no config, only overrides
    if args.judge_from:  # the pairs alone: no task, no model
        from aha.tasks.judge_pairs import write_judge_data

        if args.from_model:
            print("aha: error: --judge-from and --from-model write different data; give one", file=sys.stderr)
            return 2
        print(write_judge_data(args.judge_from, args.out).describe())
        return 0
    config = load_config(args.config, args.overrides)
    if args.from_model:
        from aha.eval.distill_data import write_teacher_data

        if args.per_prompt < 1:
            print("aha: error: --per-prompt must be at least 1", file=sys.stderr)
            return 2
        written = write_teacher_data(config, args.from_model, args.out, args.per_prompt, args.verified_only, args.limit,
                                     args.seed)
        print(written.describe())
        return 0
    if args.per_prompt != 1 or args.verified_only or args.limit is not None:
        print("aha: error: --per-prompt, --verified-only and --limit are for --from-model", file=sys.stderr)
        return 2
    files = write_synthetic(config.task, args.out, args.seed, args.max_per_file)
    print(describe(files))
    print(f"wrote {len(files)} files to {args.out}")
    return 0


def monitor(args) -> int:
    import json
    from pathlib import Path

    from aha.config import load_config
    from aha.tracking import RunDir
    from aha.training.diagnosis import Diagnosis, format_diagnosis
    from aha.training.monitor import format_flags, replay_monitor

    folder = Path(args.run)
    if not (folder / "config.yaml").is_file() or not (folder / "metrics.jsonl").is_file():
        raise FileNotFoundError(f"{folder} is not a run folder (no config.yaml and metrics.jsonl)")
    config = load_config(folder / "config.yaml", args.overrides)
    records = RunDir(folder).read_metrics()
    monitor, diagnosis = replay_monitor(config.monitor, records), Diagnosis.replay(config.diagnosis, records)
    print(json.dumps({**monitor.summary(), "diagnosis": diagnosis.summary()["flags"]}, indent=1) if args.json
          else format_flags(monitor) + "\n" + format_diagnosis(diagnosis))
    return 0


def eval_samples(config, args) -> None:
    import json
    from pathlib import Path

    from aha.eval.compare import curve_task
    from aha.eval.study import run_study
    from aha.eval.temperatures import temperature_table

    if args.samples < 1:
        raise ValueError("--samples must be at least 1")
    if config.env.name is not None:  # the study samples single answers; episodes are aha eval's greedy ones
        print(f"note: env.name={config.env.name}: --samples draws single answers to each problem (first turns); "
              "`aha eval` without --samples plays greedy episodes")
    report = run_study(config, args.models or [config.model], args.samples, Path(args.out))
    if args.json:
        print(json.dumps(report, indent=1))
        return
    pooled = bool(report.get("temperatures"))  # eval.temperatures: a table a model, temperatures beside their pool
    for label in dict.fromkeys(s["model"] for s in report["models"].values()) if pooled else ():
        print("\n".join(temperature_table(report, label)))
    for label, summary in report["models"].items():
        curve, maj = summary["curves"]["pass@k"], summary["curves"].get("maj@k")
        points = ", ".join(f"pass@{k} {m:.1%}" for k, m in zip(curve["k"], curve["mean"]) if k in (1, curve["k"][-1]))
        voting = f"maj@{curve['k'][-1]} {maj['mean'][-1]:.1%}" if maj else f"maj@{curve['k'][-1]} not computable"
        if not pooled:  # with eval.temperatures, the tables above
            print(f"{label}: {summary['problems']} problems x {summary['samples_per_problem']} samples: {points}, "
                  f"{voting}, mean length {summary['length']['mean']:.1f}")
            for name, c in summary["curves"].items():  # a mixture's tasks, each on its own problems
                if curve_task(name) is not None:
                    print(f"  [{curve_task(name)}] pass@1 {c['mean'][0]:.1%}, pass@{c['k'][-1]} {c['mean'][-1]:.1%}")
        for metric, why in summary.get("not_computable", {}).items():
            print(f"  {metric} not computable: {why}")
    comparison = report["comparison"]
    if comparison:
        cov = comparison["coverage"]
        a, b = comparison["models"]
        print(f"solved at any k: both {len(cov['both'])}, only {a} {len(cov['only_a'])}, "
              f"only {b} {len(cov['only_b'])}, neither {len(cov['neither'])}")
        crossings = comparison["pass@k_crossings"]
        between = "; ".join(f"{c['between_k'][0]} and {c['between_k'][1]}" for c in crossings)
        print(f"pass@k curves cross between k = {between}" if crossings else "pass@k curves do not cross")
    print(f"report: {Path(args.out) / 'report.html'} (numbers: report.json)")


def eval_search(config, args) -> None:
    """Step-level search (eval.search) beside best-of-N at equal tokens (eval/search_run.py)."""
    import json
    from pathlib import Path

    from aha.config import ConfigError
    from aha.eval.search_run import format_search, run_search
    from aha.eval.study import load_for_eval
    from aha.models import load
    from aha.models.checkpoints import load_weights

    if args.samples or config.env.name is not None:
        raise ConfigError(f"eval.search={config.eval.search} searches single answers: it takes no --samples and no "
                          "env.name")
    model = (args.models or [None])[0]
    loaded = load_for_eval(model, config) if model else load(config.model, seed=config.seed)
    if args.checkpoint:
        load_weights(loaded.model, Path(args.checkpoint))
    report = run_search(config, loaded)
    if args.output:
        Path(args.output).write_text("".join(json.dumps(r) + "\n" for r in report["records"]))
    print(json.dumps({k: v for k, v in report.items() if k != "records"}, indent=1) if args.json
          else "\n".join(format_search(report)))


def eval_greedy(config, checkpoint: str | None, model: str | None, output: str | None) -> None:
    """Greedy held-out accuracy of the config's model, of that model with a checkpoint's
    weights (--checkpoint), or of another model or checkpoint folder (--model)."""
    import json
    from pathlib import Path

    from aha.eval.greedy import greedy_held_out
    from aha.eval.runner import by_task

    if config.eval.temperatures:
        print("note: eval.temperatures applies to `aha eval --samples N`; greedy evaluation samples at no temperature")
    found = greedy_held_out(config, checkpoint, model)
    result = found.result
    if output:
        Path(output).write_text("".join(json.dumps(r) + "\n" for r in result.samples))
    print(f"{found.source} on {found.held_out}: held-out greedy accuracy {result.accuracy:.1%} "
          f"({result.n} problems; right: {found.right})")
    if by_task(result.metrics):  # a task mixture
        print(f"  by task: {by_task(result.metrics)}")
    if "eval/first_turn_accuracy" in result.metrics:  # multi-turn episodes
        print(f"  {config.env.name} episodes of up to {config.env.max_turns} turns: first-turn accuracy "
              f"{result.metrics['eval/first_turn_accuracy']:.1%}, final {result.accuracy:.1%}, "
              f"mean turns {result.metrics['eval/turns']:.2f}, mean return {result.metrics['eval/return']:.3f}")


def audit(config, args) -> None:
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
