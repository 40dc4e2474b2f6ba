"""Run folders: resolved config, metrics.jsonl, samples.jsonl, log.txt."""

from aha.tracking.run_dir import RunDir

__all__ = ["RunDir"]
