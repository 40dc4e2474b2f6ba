"""n samples per held-out problem, drawn once and kept on disk.

A cache folder holds `meta.json` (what the samples are of: model and the content id of its
weights, task, sampling settings) and `samples.jsonl` (one scored sample per line). Sampling appends whole chunks and
flushes, so an interrupted run loses at most the chunk in flight; a rerun draws only the
samples still missing, and a cache is never mixed with samples drawn otherwise (a
different model, task or setting is an error that names the difference). The weights' id
(aha.models.loading.weights_id) catches a model retrained into the same folder: its old samples
are refused, never reused.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tqdm.auto import tqdm

from aha.eval.scoring import Scorer
from aha.jsonl import read_jsonl
from aha.rewards.extract import final_answer
from aha.rewards.verifiers import extract_answer
from aha.tasks import Task, encode_prompts

if TYPE_CHECKING:
    from aha.rollout import Engine


class CacheMismatch(ValueError):
    """A sample cache made with other settings than asked."""


def vote_key(completion: str) -> str | None:
    """What majority voting compares: the final number if there is one (so 12, 12.0 and
    \\boxed{12} agree), else the final answer span's text."""
    number = extract_answer(completion)
    if number is not None and math.isfinite(number):
        return f"{number:g}"
    text = final_answer(completion)
    return text.strip() if text else None


@dataclass
class SampleCache:
    folder: Path
    meta: dict  # model, task, temperature, top_p, max_new_tokens, scorer, ...

    def __post_init__(self):
        self.folder = Path(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path = self.folder / "meta.json"
        if meta_path.exists():
            stored = json.loads(meta_path.read_text())
            if "weights" in self.meta and stored.get("weights") != self.meta["weights"]:
                raise CacheMismatch(self._stale(stored.get("weights")))
            differ = sorted(k for k in set(stored) | set(self.meta) if stored.get(k) != self.meta.get(k))
            if differ:
                detail = ", ".join(f"{k}: {stored.get(k)!r} there, {self.meta.get(k)!r} asked" for k in differ)
                raise CacheMismatch(f"{self.folder} holds samples drawn otherwise ({detail}); use another folder")
        else:
            meta_path.write_text(json.dumps(self.meta, indent=1))
        self.path = self.folder / "samples.jsonl"

    def _stale(self, stored: str | None) -> str:
        what = (f"samples of other weights: weights id {stored} there, {self.meta['weights']} now "
                "(the model was retrained or changed since they were drawn)") if stored else \
            ("samples drawn before aha recorded the weights' id, so they may be of other weights than "
             f"{self.meta['weights']}")
        return (f"{self.folder} holds {what}; they are not reused. To draw new samples, give another --out "
                f"or delete {self.folder}")

    def load(self) -> dict[str, list[dict]]:
        """Samples by problem id. A torn last line (a crash mid-write) is dropped from the file."""
        by_problem: dict[str, list[dict]] = {}
        if not self.path.exists():
            return by_problem
        records = [r for _, r in read_jsonl(self.path, CacheMismatch, torn_tail=True)]
        with self.path.open("rb") as handle:  # whole lines end in a newline: without one, the last line was torn
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(size - 1, 0))
            torn = size > 0 and handle.read(1) != b"\n"
        if torn:  # read_jsonl left it out; drop it from the file too, so appends start on a fresh line
            self.path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        for record in records:
            by_problem.setdefault(record["id"], []).append(record)
        return by_problem

    def append(self, records: list[dict]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(r) + "\n" for r in records))
            handle.flush()


def draw_samples(engine: Engine, task: Task, problems: list[dict], scorer: Scorer, n: int,
                 cache: SampleCache, seed: int = 0, desc: str = "sample",
                 have: dict[str, list[dict]] | None = None, temperature: float | None = None
                 ) -> dict[str, list[dict]]:
    """Make sure the cache holds n samples of every problem; returns them by problem id.
    `have` is cache.load() when the caller has already read it; temperature (None: the
    engine's own) must be the one the cache's meta records. A sample the scorer cannot
    score stops it with a ScorerError; the chunks already appended stay in the cache."""
    have = cache.load() if have is None else have
    missing = [(p, n - len(have.get(p["id"], []))) for p in problems if len(have.get(p["id"], [])) < n]
    bar = tqdm(total=len(problems) * n, initial=len(problems) * n - sum(m for _, m in missing), desc=desc,
               unit="sample")
    # whole problems per generate() call: each prompt is prefilled once for all its samples
    per_call = max(1, engine.batch_size // n)
    for start in range(0, len(missing), per_call):
        chunk = missing[start:start + per_call]
        group = max(m for _, m in chunk)
        torch.manual_seed(seed * 1_000_003 + sum(len(have.get(p["id"], [])) for p, _ in chunk) + start)
        at = {} if temperature is None else {"temperature": temperature}  # None: the engine's, the call as it was
        prompts = encode_prompts(engine.tokenizer, task, [p for p, _ in chunk])
        rollouts = engine.generate(prompts, group_size=group, **at)
        lengths, logprobs = rollouts.lengths(), rollouts.sampling_logprobs.sum(dim=1)
        # the chunk's group size fits its neediest problem; keep what each lacks
        rows = [(row, chunk[p][0]) for row, p in enumerate(rollouts.prompt_index.tolist())
                if row - p * group < chunk[p][1]]
        scores = scorer.score([rollouts.texts[row] for row, _ in rows], [problem for _, problem in rows],
                              [int(lengths[row]) for row, _ in rows])
        records = []
        for (row, problem), score in zip(rows, scores):
            text, length = rollouts.texts[row], int(lengths[row])
            records.append({"id": problem["id"], "completion": text, "length": length,
                            "truncated": bool(rollouts.truncated[row]), "score": score,
                            "answer": vote_key(text), "mean_logprob": float(logprobs[row]) / max(length, 1)})
            if rollouts.certainty is not None:
                records[-1]["self_certainty"] = float(rollouts.certainty[row].sum()) / max(length, 1)
        cache.append(records)
        for record in records:
            have.setdefault(record["id"], []).append(record)
        bar.update(len(records))
    bar.close()
    return {p["id"]: have[p["id"]][:n] for p in problems}
