"""Audit a reward against labelled completions: how often does it accept a wrong answer
(false positive) or reject a right one (false negative)? VerifyBench-style."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from tqdm.auto import tqdm

from aha.jsonl import read_jsonl
from aha.rewards.compose import CompositeReward
from aha.rewards.functions import RewardError


@dataclass
class AuditResult:
    n: int
    positives: int  # labelled correct
    negatives: int  # labelled wrong
    false_positives: list[dict] = field(default_factory=list)  # wrong, but the reward accepted
    false_negatives: list[dict] = field(default_factory=list)  # correct, but the reward rejected
    failed: int = 0  # the reward raised (scored as a rejection)
    by_category: dict[str, dict] = field(default_factory=dict)

    @property
    def fp_rate(self) -> float:
        return len(self.false_positives) / max(self.negatives, 1)

    @property
    def fn_rate(self) -> float:
        return len(self.false_negatives) / max(self.positives, 1)

    @property
    def accuracy(self) -> float:
        return 1.0 - (len(self.false_positives) + len(self.false_negatives)) / max(self.n, 1)


def load_labels(path: str | Path) -> list[dict]:
    """JSONL, one {completion, reference, label: true|false, ...} per line (`answer` is
    accepted for `reference`); errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"labels file not found: {path}")
    records = []
    for number, record in read_jsonl(path, RewardError):
        if not isinstance(record, dict) or "completion" not in record or not isinstance(record.get("label"), bool) \
                or ("reference" not in record and "answer" not in record):
            raise RewardError(f"{path}:{number}: needs 'completion', 'reference' (or 'answer') and a "
                              "true/false 'label'")
        records.append(record)
    if not records:
        raise RewardError(f"{path}: no labelled records")
    return records


def audit_reward(reward: CompositeReward, records: list[dict], threshold: float = 0.5) -> AuditResult:
    """The reward accepts a completion when its total is >= threshold."""
    result = AuditResult(n=len(records), positives=sum(r["label"] for r in records),
                         negatives=sum(not r["label"] for r in records))
    # a reward that raises is counted (and shown) in the report, not logged once per record
    reward_log = logging.getLogger("aha.rewards.compose")
    level, reward_log.level = reward_log.level, logging.ERROR
    try:
        _score_into(result, reward, records, threshold)
    finally:
        reward_log.setLevel(level)
    return result


def _score_into(result: AuditResult, reward: CompositeReward, records: list[dict], threshold: float) -> None:
    for start in tqdm(range(0, len(records), 64), desc="audit", unit="batch", leave=False):
        chunk = records[start:start + 64]
        samples = [{**r, "answer": r.get("reference", r.get("answer"))} for r in chunk]
        scored = reward.score([r["completion"] for r in chunk], samples)
        for record, total, failed in zip(chunk, scored.total.tolist(), scored.failed.tolist()):
            accepted = total >= threshold and not failed
            result.failed += int(failed)
            row = {**record, "reward": total, "failed": failed}
            if accepted and not record["label"]:
                result.false_positives.append(row)
            elif not accepted and record["label"]:
                result.false_negatives.append(row)
            stats = result.by_category.setdefault(record.get("category", "all"), {"n": 0, "fp": 0, "fn": 0})
            stats["n"] += 1
            stats["fp"] += int(accepted and not record["label"])
            stats["fn"] += int(not accepted and record["label"])


def format_audit(result: AuditResult, name: str, examples: int = 3) -> str:
    lines = [f"{name}: {result.n} labelled completions ({result.positives} correct, {result.negatives} wrong)",
             f"  false-negative rate {result.fn_rate:.1%} ({len(result.false_negatives)} right answers rejected)",
             f"  false-positive rate {result.fp_rate:.1%} ({len(result.false_positives)} wrong answers accepted)",
             f"  reward raised on {result.failed} (counted as rejections)"]
    worst = sorted(result.by_category.items(), key=lambda kv: -(kv[1]["fp"] + kv[1]["fn"]))
    lines.append("  by category (errors / n): " + ", ".join(f"{k} {v['fp'] + v['fn']}/{v['n']}" for k, v in worst))
    for title, rows in (("false negatives", result.false_negatives), ("false positives", result.false_positives)):
        for row in rows[:examples]:
            lines.append(f"  {title[:-1]}: reference {row.get('reference', row.get('answer'))!r}, completion "
                         f"{row['completion']!r}")
    return "\n".join(lines)
