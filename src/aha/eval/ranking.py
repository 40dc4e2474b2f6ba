"""Scores of cached samples by a reward named in `eval.rank_by` (a reward model, a judge,
a verifier), for best-of-k and weighted voting.

A ranker can be slow (a judge model), so its scores are kept next to the samples in
`ranks/<name>-<fingerprint>.jsonl`, one {id, index, score} per line, where index is the
sample's place in its problem's list (the sample cache only ever appends, so it is
stable) and the fingerprint is a hash of the reward's settings: changing them scores
again into another file, rerunning scores only what is missing.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from tqdm.auto import tqdm

from aha.config import RewardSpec
from aha.jsonl import read_jsonl
from aha.rewards.compose import CompositeReward

CHUNK = 256  # completions per reward call


def ranker_file(folder: Path, name: str, spec: RewardSpec, reward: CompositeReward | None = None) -> Path:
    """A reward model's scores also depend on the checkpoint its `model:` resolved to and on
    that checkpoint's weights, so a run that trained on, or one retrained in place, scores anew."""
    identity = spec.model_dump_json()
    checkpoint = getattr(reward.components[0].fn, "aha_checkpoint", None) if reward is not None else None
    if checkpoint is not None:
        from aha.models.loading import weights_id

        identity += f" {checkpoint} {weights_id(checkpoint)}"
    fingerprint = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return Path(folder) / "ranks" / f"{name}-{fingerprint}.jsonl"


def rank_scores(reward: CompositeReward, path: Path, problems: list[dict], by_problem: dict[str, list[dict]],
                desc: str = "rank") -> dict[str, list[float]]:
    """The reward's total for every sample, by problem id (NaN where the reward failed:
    such a sample is ranked last and gets no vote)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    have = {}
    if path.is_file():
        have = {(r["id"], r["index"]): r["score"] for _, r in read_jsonl(path, ValueError, torn_tail=True)}
    todo = [(p, j) for p in problems for j in range(len(by_problem[p["id"]])) if (p["id"], j) not in have]
    bar = tqdm(total=len(todo), desc=desc, unit="sample", disable=not todo)
    with path.open("a", encoding="utf-8") as handle:
        for start in range(0, len(todo), CHUNK):
            chunk = todo[start:start + CHUNK]
            drawn = [by_problem[p["id"]][j] for p, j in chunk]
            lengths = [record.get("length") for record in drawn]  # the tokens generated, which length rewards read
            result = reward.score([record["completion"] for record in drawn], [p for p, _ in chunk],
                                  None if None in lengths else lengths)
            rows = []
            for (p, j), total, failed in zip(chunk, result.total.tolist(), result.failed.tolist()):
                have[(p["id"], j)] = math.nan if failed else total
                rows.append({"id": p["id"], "index": j, "score": have[(p["id"], j)]})
            handle.write("".join(json.dumps(r) + "\n" for r in rows))
            handle.flush()
            bar.update(len(chunk))
    bar.close()
    return {p["id"]: [have[(p["id"], j)] for j in range(len(by_problem[p["id"]]))] for p in problems}
