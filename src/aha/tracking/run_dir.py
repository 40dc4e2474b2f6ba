"""A run is a folder; this writes its files. One JSON object per line, appended and flushed."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from aha.jsonl import read_jsonl
from aha.tracking.faults import kill_point

log = logging.getLogger(__name__)

# each RL group's outcome, a line per group: {step, epoch, id, right, tried} (aha select reads it)
GROUPS_FILE = "groups.jsonl"


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.path / "metrics.jsonl"
        self.samples_path = self.path / "samples.jsonl"
        self.groups_path = self.path / GROUPS_FILE
        self.checkpoints = self.path / "checkpoints"
        self._handler: logging.Handler | None = None
        self.sinks = None  # optional views of the metrics (TensorBoard, MLflow, W&B, trackio): tracking/sinks.py

    def write_config(self, text: str) -> None:
        write_whole(self.path / "config.yaml", text)

    def append_config_history(self, step: int, changes: dict) -> None:
        """A config change a resume brought (train.allow_config_change): the step it takes effect."""
        append_jsonl(self.path / "config_history.jsonl", [{"step": step, "changes": changes}])

    def attach_log(self) -> None:
        """Infrastructure logs (warnings, reward errors) go to log.txt, not the console bar."""
        self._handler = logging.FileHandler(self.path / "log.txt")
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logging.getLogger("aha").addHandler(self._handler)
        logging.getLogger("aha").setLevel(logging.INFO)

    def detach_log(self) -> None:
        if self._handler is not None:
            logging.getLogger("aha").removeHandler(self._handler)
            self._handler.close()

    def log_metrics(self, record: dict) -> None:
        append_jsonl(self.metrics_path, [record])
        if self.sinks is not None:
            try:
                self.sinks.log(record)
            except Exception:  # metrics.jsonl has the record: a failing view must not stop training
                log.warning("metrics sink failed; it is switched off for the rest of the run", exc_info=True)
                self.sinks = None

    def log_samples(self, records: list[dict]) -> None:
        append_jsonl(self.samples_path, records)

    def truncate_after(self, step: int) -> None:
        """On resume from step N, drop records of later steps, so the files read as if the
        run had never stopped (no step logged twice)."""
        for path in (self.metrics_path, self.samples_path, self.groups_path):
            self._rewrite(path, lambda r: r.get("step", -1) <= step)

    def drop_samples(self, step: int, split: str) -> None:
        """Drop the samples.jsonl records of one step's split (an evaluation to be made again)."""
        self._rewrite(self.samples_path, lambda r: not (r.get("step") == step and r.get("split") == split))

    @staticmethod
    def _rewrite(path: Path, keep) -> None:
        """Keep the records `keep` accepts, replacing the file whole (never half rewritten);
        untouched when it keeps them all. A line torn by a kill mid-write is dropped too."""
        if not path.exists():
            return
        records = read_jsonl(path, torn_tail=True)
        kept = [r for _, r in records if keep(r)]
        text = "".join(json.dumps(r) + "\n" for r in kept)
        if len(kept) < len(records) or len(text.encode()) != path.stat().st_size:
            write_whole(path, text)

    def read_metrics(self) -> list[dict]:
        if not self.metrics_path.exists():
            return []
        return [r for _, r in read_jsonl(self.metrics_path, torn_tail=True)]


class RunWriteError(RuntimeError):
    """A run's file could not be written (the disk is full, the folder read-only): the run
    stops with what it had written whole, to be resumed once the disk allows it."""


def free_space(path: Path) -> str:
    try:
        return f"{shutil.disk_usage(path).free / 2**20:.0f} MiB free"
    except OSError:
        return "free space unknown"


def write_whole(path: Path, text: str) -> None:
    """path holds text, or (a full disk, a kill) what it held before: written beside it, then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise RunWriteError(f"could not write {path}: {err.strerror or err} ({free_space(path.parent)}); it is "
                            "as it was: free some space (or make the folder writable) and run again") from None


def append_jsonl(path: Path, records: list[dict]) -> None:
    """Append records as lines, all or none: a write the disk refuses is cut back to the
    file's size before it (no half line left) and raised as a RunWriteError."""
    text = "".join(json.dumps(record) + "\n" for record in records)
    size = path.stat().st_size if path.exists() else 0
    try:
        with path.open("a", encoding="utf-8") as handle:
            handle.write(text[:len(text) // 2])
            handle.flush()
            kill_point("append")  # a kill here leaves half a line: resume drops it
            handle.write(text[len(text) // 2:])
    except OSError as err:
        try:
            os.truncate(path, size)
        except OSError:
            pass  # a torn last line is dropped when the run resumes (read_jsonl's torn_tail)
        raise RunWriteError(f"could not write {path}: {err.strerror or err} ({free_space(path.parent)}); the run "
                            "stopped with its files whole; free some space (or make the folder writable) and run "
                            "again with train.resume=true") from None
