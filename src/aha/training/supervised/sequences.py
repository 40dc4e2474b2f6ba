"""Supervised sequences (SFT responses, preference pairs): read from JSONL with file:line
errors, a prompt's token ids and a completion's fitted to a length budget, padded into a
batch (prompts left, completions right, as the engine lays out rollouts) and scored token
by token with gradient."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from aha.errors import TaskError
from aha.models.compute import autocast, stop_token
from aha.tasks import Task, encode_prompts
from aha.tasks.samples import read_prompt_rows
from aha.training.logprobs import completion_logprobs


def read_examples(path: Path, fields: tuple[str, ...]) -> list[dict]:
    """Rows (of any format tasks/files.py reads) holding a prompt and the string fields named,
    each with `where` = file:line or file row N for error messages; a bad row is an error
    naming it."""
    absent = lambda row: ", ".join(k for k in ("prompt", *fields) if k not in row) or None
    rows = []
    for where, row in read_prompt_rows(path, absent, "data", "examples"):
        check_texts(row, fields, where)
        rows.append({**row, "where": where})
    return rows


def check_texts(row: dict, fields: tuple[str, ...], where: str) -> None:
    for key in fields:
        if not isinstance(row[key], str) or not row[key].strip():
            raise TaskError(f"{where}: {key} must be a non-empty string, got {row[key]!r}")


def check_pair(row: dict, where: str) -> None:
    """A pair's two completions must differ: there is nothing to learn from a tie."""
    if row["chosen"] == row["rejected"]:
        raise TaskError(f"{where}: chosen and rejected are the same completion")


def read_pairs(path, with_margin: bool) -> list[dict]:
    """read_examples' checks (file:line errors), and: a pair's two completions must differ
    (nothing to learn from a tie), and with rm.margin=data each pair needs a numeric margin."""
    rows = read_examples(path, ("chosen", "rejected"))
    for row in rows:
        check_pair(row, row["where"])
        margin = row.get("margin")
        number = isinstance(margin, (int, float)) and not isinstance(margin, bool)
        if with_margin and (not number or not math.isfinite(margin)):
            raise TaskError(f"{row['where']}: rm.margin=data needs a finite number in the field margin, got {margin!r}")
    return rows


@dataclass(frozen=True)
class Sequence:
    prompt: tuple[int, ...]
    completion: tuple[int, ...]  # ends with the EOS token unless cut by the length budget
    truncated: bool  # lost the end of its completion to max_length

    def __len__(self) -> int:
        return len(self.prompt) + len(self.completion)


def encode_sequences(tokenizer, task: Task, prompts: list, completions: list[str], stop: int, max_length: int,
                     where: list[str], length_key: str = "max_length") -> list[Sequence]:
    """Prompts through the chat template (as they will be asked at evaluation), completions
    as plain tokens + stop. A completion longer than the budget loses its end (and its stop
    token); a prompt that leaves no room for one completion token is an error naming where
    it came from (file:line) and the config key of the budget (length_key)."""
    prompt_ids = encode_prompts(tokenizer, task, [{"prompt": p} for p in prompts])
    out = []
    for ids, text, place in zip(prompt_ids, completions, where):
        if len(ids) >= max_length:
            raise TaskError(f"{place}: the prompt is {len(ids)} tokens, leaving no room for a completion within "
                            f"{length_key}={max_length}; raise {length_key} or shorten the prompt")
        completion = tokenizer(text, add_special_tokens=False)["input_ids"] + [stop]
        room = max_length - len(ids)
        out.append(Sequence(tuple(ids), tuple(completion[:room]), len(completion) > room))
    return out


def sequences_id(named: dict[str, list[Sequence]], kind: str) -> str:
    """A fingerprint of named lists of token sequences and of the kind of method (and its
    labels) they serve: what cached reference log-probs were computed on, so that a resume
    over other data (an edited or longer file, another max_length, another loss) is refused
    instead of reading the wrong numbers."""
    digest = hashlib.sha256(kind.encode())
    for name in sorted(named):
        digest.update(f"{name}:{len(named[name])};".encode())
        for s in named[name]:
            digest.update(f"{s.prompt}|{s.completion};".encode())
    return digest.hexdigest()


class CachedReference:
    """For a method that computes its reference log-probs once, before the first update, and
    keeps them in its checkpoints (dict name -> (N,) tensor in self.reference). A resume
    over other sequences than those they were computed on is refused, not read wrongly.
    The method says which sequences (data_id), its name for messages, and whether it cannot
    go on without them (reference_required)."""

    method_name: str
    reference: dict | None

    def data_id(self) -> str:
        raise NotImplementedError

    def reference_required(self) -> bool:
        return True

    def extra_state(self) -> dict | None:
        if self.reference is None:
            return None
        return {"reference_logps": self.reference, "reference_data": self.data_id()}

    def restore(self, state: dict, extra: dict, metrics: list[dict]) -> None:
        super().restore(state, extra, metrics)
        reference, held = extra.get("reference_logps"), extra.get("reference_data")
        if reference is not None and held is not None and held != self.data_id():
            raise ValueError(f"the reference log-probs in this {self.method_name} run's checkpoint were computed on "
                             "other sequences: dpo.data, dpo.eval_data, dpo.max_length, dpo.loss or the files' "
                             "contents "
                             "changed since the run started. Resume with the data it started with, or start afresh in "
                             "a new output_dir")
        self.reference = reference
        if self.reference is None and self.reference_required():
            raise ValueError("the checkpoint holds no reference log-probs, and the weights the run started from are "
                             f"gone: start this {self.method_name} run afresh in a new output_dir")


def pad(sequences: list[Sequence], pad_id: int) -> tuple[torch.Tensor, ...]:
    """(prompt_ids, prompt_mask) left-padded, (completion_ids, completion_mask) right-padded."""
    P = max(len(s.prompt) for s in sequences)
    T = max(len(s.completion) for s in sequences)
    prompt_ids = torch.full((len(sequences), P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(sequences), P), dtype=torch.long)
    completion_ids = torch.full((len(sequences), T), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(sequences), T))
    for i, s in enumerate(sequences):
        prompt_ids[i, P - len(s.prompt):] = torch.tensor(s.prompt)
        prompt_mask[i, P - len(s.prompt):] = 1
        completion_ids[i, :len(s.completion)] = torch.tensor(s.completion)
        completion_mask[i, :len(s.completion)] = 1.0
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def token_logprobs(model, sequences: list[Sequence], pad_id: int,
                   dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) log pi(completion_t | prompt, completion_<t) at temperature 1 (0 on padding)
    and the (N, T) completion mask. Differentiable unless called under no_grad."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = pad(sequences, pad_id)
    with autocast(dtype, model.device):  # the log-probs come back on the CPU, as the mask is
        logprobs = completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    return logprobs, completion_mask


def micro_batches(indices: list[int], lengths: list[int], size: int, by_length: bool) -> list[list[int]]:
    """indices cut into groups of at most `size`; by_length sorts them by length first, so
    each group pads to nearly its own length (the summed loss is the same either way)."""
    order = sorted(indices, key=lambda i: lengths[i]) if by_length else list(indices)
    return [order[s:s + size] for s in range(0, len(order), size)]


@dataclass
class Pairs:
    """Preference pairs: the rows as read, and each row's chosen and rejected sequence."""

    rows: list[dict]
    chosen: list[Sequence]
    rejected: list[Sequence]

    def tokens(self, index: list[int]) -> list[list[int]]:
        """Token sequences of pairs[index]: all chosen first, then all rejected."""
        ordered = [self.chosen[i] for i in index] + [self.rejected[i] for i in index]
        return [list(s.prompt + s.completion) for s in ordered]


def encode_pairs(setup, rows: list[dict], max_length: int, length_key: str) -> Pairs:
    """Both completions of each row after its prompt, as encode_sequences makes them."""
    s = setup
    encode = lambda key: encode_sequences(s.tokenizer, s.task, [r["prompt"] for r in rows], [r[key] for r in rows],
                                          stop_token(s.tokenizer, s.model), max_length, [r["where"] for r in rows],
                                          length_key)
    return Pairs(rows, encode("chosen"), encode("rejected"))


def pair_micro_batches(pairs: Pairs, picked: list[int], micro_batch_size: int, ranks: int = 1) -> list[list[int]]:
    """Whole pairs per micro-batch of micro_batch_size sequences (a pair's loss needs both of
    its completions), pairs of like lengths together; over that many learner ranks, each
    micro-batch holds one such share per rank (rank_passes splits it)."""
    lengths = [max(len(c), len(r)) for c, r in zip(pairs.chosen, pairs.rejected)]
    return micro_batches(picked, lengths, max(1, micro_batch_size // 2) * ranks, by_length=True)
