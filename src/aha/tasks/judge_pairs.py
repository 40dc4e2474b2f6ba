"""`aha data --judge-from PAIRS`: preference pairs as training prompts for a pairwise judge.

Each pair {prompt, chosen, rejected} becomes two judge prompts (rewards/pairwise.py's, the one
`fn: pairwise_judge` asks): chosen shown as A with answer "A", and chosen shown as B with answer
"B". The position-swapped copy is what keeps a judge from learning "always A": a judge that
ignores the responses scores exactly half, whichever letter it favours. The rows are task
data ({id, prompt, answer, pattern}): train a judge on them by RL with `fn: multiple_choice`
(the letter its reply settles on), or `fn: regex_match` (the row's pattern: the letter its reply
starts with, the verdict pairwise_judge reads)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from aha.errors import TaskError
from aha.prompts import prompt_text
from aha.rewards.pairwise import VERDICTS, judge_messages
from aha.tasks.samples import read_prompt_rows

FIELDS = ("prompt", "chosen", "rejected")
# the reply starts with the right letter, as pairwise_judge reads a verdict (fn: regex_match reads
# it from the row); multiple_choice reads the last letter: "B is better than A" counts as A
VERDICT_PATTERN = r"^\s*{}\b"


def _missing(row: dict) -> str | None:
    absent = [f for f in FIELDS if f not in row]
    return ", ".join(absent) if absent else None


def judge_rows(where: str, pair: dict, pair_id: str) -> list[dict]:
    """The pair's two judge prompts: chosen first (answer A), then chosen second (answer B)."""
    for field in ("chosen", "rejected"):
        if not isinstance(pair[field], str):
            raise TaskError(f"{where}: {field} must be a string, got {type(pair[field]).__name__}")
    if pair["chosen"] == pair["rejected"]:
        raise TaskError(f"{where}: chosen and rejected are the same text; no judge can tell them apart")
    question = prompt_text(pair["prompt"])
    extra = {"subset": pair["subset"]} if "subset" in pair else {}
    orders = [("chosen_first", pair["chosen"], pair["rejected"], VERDICTS[0]),
              ("chosen_second", pair["rejected"], pair["chosen"], VERDICTS[1])]
    return [{"id": f"{pair_id}/{order}", "prompt": judge_messages(question, first, second), "answer": answer,
             "pattern": VERDICT_PATTERN.format(answer), "pair": pair_id, "order": order, **extra}
            for order, first, second, answer in orders]


@dataclass
class JudgeData:
    """What `aha data --judge-from` wrote."""

    path: Path
    pairs: int
    rows: int

    def describe(self) -> str:
        return f"{self.pairs} pairs -> {self.rows} judge prompts (both orders, answers A/B) in {self.path}"


def write_judge_data(pairs_path: str | Path, out: str | Path) -> JudgeData:
    """OUT/judge_<stem of PAIRS>.jsonl from a preference file; a bad row is a TaskError naming
    its file and line. A pair's id is its own `id` (the line's place where it has none), made
    unique: two pairs of one question keep apart."""
    pairs_path = Path(pairs_path)
    rows = read_prompt_rows(pairs_path, _missing, "preference pairs", "pairs")
    seen: dict[str, int] = {}
    written = []
    for where, pair in rows:
        base = str(pair.get("id", where.rpartition("/")[2]))
        seen[base] = seen.get(base, 0) + 1
        pair_id = base if seen[base] == 1 else f"{base}#{seen[base]}"
        written += judge_rows(where, pair, pair_id)
    path = Path(out) / f"judge_{pairs_path.stem}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in written), encoding="utf-8")
    return JudgeData(path, len(rows), len(written))
