"""The `aha` command: train, eval, audit, monitor, report, bench, plan, export, select, data.
Arguments in cli/parser.py, what each command does in cli/commands.py."""

from __future__ import annotations

import os
import sys

from aha.cli.parser import build_parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # aha train on N ranks starts the same command N times
    if args.command == "eval" and not args.samples and args.models:
        if len(args.models) > 1:
            parser.error("comparing models (--model given more than once) needs --samples N")
        if args.checkpoint:
            parser.error("give --model or --checkpoint, not both: --checkpoint puts its weights into the config's "
                         "model")
    if args.command == "bench" and (args.steps < 2 or args.pairs < 1):
        parser.error("--steps must be at least 2 (the first is warm-up) and --pairs at least 1")
    # after argparse: --help stays instant; torch and transformers load in ~5 s
    from aha.cli import commands
    from aha.cli.learners import LearnerRankFailed
    from aha.config import ConfigError
    from aha.envs import EnvError
    from aha.eval.sampling import CacheMismatch
    from aha.models.compute import retain_freed_memory
    from aha.rewards import RewardError
    from aha.tasks import TaskError
    from aha.tracking.run_dir import RunWriteError
    from aha.tracking.run_report import RunReportError
    from aha.training.interrupt import TrainingInterrupted

    retain_freed_memory()
    without_config = {"monitor": commands.monitor, "report": commands.report, "data": commands.data,
                      "select": commands.select, "export": commands.export, "bench": commands.bench}
    try:
        if args.command in without_config:
            return without_config[args.command](args)
        if args.command == "eval" and args.config and "=" in args.config and not os.path.exists(args.config):
            args.config, args.overrides = None, [args.config, *args.overrides]  # no config, only overrides
        return commands.with_config(args)
    except TrainingInterrupted as err:  # its message is on the console and in log.txt already
        return err.code
    except (ConfigError, TaskError, RewardError, EnvError, FileNotFoundError, FileExistsError, CacheMismatch,
            RunReportError, RunWriteError, LearnerRankFailed) as err:  # ModelNotFound is one
        print(f"aha: error: {err}", file=sys.stderr)
        return 2
