"""method: dpo with dpo.loss=kto. KTO (Ethayarajh et al. 2024) learns from single completions
labelled desirable or undesirable, so it needs no pairs: a file of {prompt, completion,
label} will do, and a file of pairs gives each pair's chosen completion as desirable and its
rejected one as undesirable (as TRL's unpair_preference_dataset does).

Each completion's implicit reward r = log pi(y|x) - log ref(y|x) is compared with a reference
point z0, the policy's KL to the reference, estimated each step on mismatched sequences (each
prompt of the step with another prompt's completion, as TRL does) without gradient. The
reference log-probs of every sequence, mismatched ones included, are computed once, before
the first update, and kept in the checkpoints, as for DPO."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from aha.algorithms import kto_loss, kto_reference_point
from aha.config import Config
from aha.config.paths import resolve_path
from aha.errors import TaskError
from aha.models.adapters import trainable_parameters
from aha.models.compute import stop_token
from aha.prompts import prompt_text
from aha.rewards import CompositeReward
from aha.tasks import PromptSampler, Task
from aha.tasks.samples import read_prompt_rows
from aha.tasks.split import split_rows
from aha.training.method import CursorMethod, Setup
from aha.training.optimizer import accumulated_step, build_optimizer
from aha.training.phases import Phases
from aha.training.supervised.dpo import pair_accuracy
from aha.training.supervised.sequences import (
    CachedReference,
    Sequence,
    check_pair,
    check_texts,
    encode_sequences,
    micro_batches,
    sequences_id,
    token_logprobs,
)


def _missing(row: dict) -> str | None:
    fields = ("completion", "label") if "completion" in row or "label" in row else ("chosen", "rejected")
    return ", ".join(k for k in ("prompt", *fields) if k not in row) or None


def read_labelled(path: Path) -> list[dict]:
    """Rows {prompt, completion, label (true: desirable)} or {prompt, chosen, rejected}, in
    any mix, each checked with file:line errors. Returns one row per completion: prompt,
    completion, desirable, where, subset (if given) and pair (the index shared by the two
    completions of one pair, else None)."""
    out, pairs = [], 0
    for where, row in read_prompt_rows(path, _missing, "data", "examples"):
        if ("completion" in row or "label" in row) and ("chosen" in row or "rejected" in row):
            raise TaskError(f"{where}: a row holds either completion + label or chosen + rejected, not both")
        common = {"prompt": row["prompt"], "where": where,
                  **({"subset": str(row["subset"])} if "subset" in row else {})}
        if "completion" in row:
            check_texts(row, ("completion",), where)
            if not isinstance(row["label"], bool):
                raise TaskError(f"{where}: label must be true (desirable) or false (undesirable), got {row['label']!r}")
            out.append({**common, "completion": row["completion"], "desirable": row["label"], "pair": None})
            continue
        check_texts(row, ("chosen", "rejected"), where)
        check_pair(row, where)
        out.append({**common, "completion": row["chosen"], "desirable": True, "pair": pairs})
        out.append({**common, "completion": row["rejected"], "desirable": False, "pair": pairs})
        pairs += 1
    return out


def mismatched_partners(rows: list[dict], path: str) -> list[int]:
    """For each row, the next row (cyclically) whose prompt differs and whose label is the
    same (else any whose prompt differs): its completion after this row's prompt is the
    mismatched sequence KTO's reference point is estimated on. With the label kept, the
    mismatched completions are the same mix of desirable and undesirable ones as the rows
    (TRL rotates the batch's own completions); a pair's chosen and rejected rows would
    otherwise both borrow the next pair's chosen completion."""
    keys = [json.dumps(r["prompt"], sort_keys=True) for r in rows]
    any_label = _next_with_other_prompt(list(range(len(rows))), keys)
    same_label = {}
    for label in (True, False):
        same_label.update(_next_with_other_prompt([i for i, r in enumerate(rows) if r["desirable"] == label], keys))
    partners = []
    for i in range(len(rows)):
        j = same_label[i] if same_label[i] is not None else any_label[i]
        if j is None:
            raise TaskError(f"{path}: dpo.loss=kto needs completions of at least two different prompts (its "
                            "reference point pairs each prompt with another prompt's completion)")
        partners.append(j)
    return partners


def _next_with_other_prompt(order: list[int], keys: list[str]) -> dict[int, int | None]:
    """For each row of order, the first row after it (cyclically, in order) whose prompt key
    differs, or None: one backward pass over order twice, linear in its length."""
    twice, found = order + order, {}
    following: int | None = None  # position in twice of the next row whose key differs from the current run's
    for k in range(len(twice) - 1, -1, -1):
        if k + 1 < len(twice) and keys[twice[k + 1]] != keys[twice[k]]:
            following = k + 1
        if k < len(order):
            found[order[k]] = twice[following] if following is not None and following < k + len(order) else None
    return found


@dataclass
class Labelled:
    """Labelled completions: the rows as read, each row's sequence, which are desirable, and
    (training only) each row's prompt followed by another prompt's completion."""

    rows: list[dict]
    sequences: list[Sequence]
    desirable: torch.Tensor  # (N,) bool
    mismatched: list[Sequence]


def encode_labelled(setup: Setup, rows: list[dict], max_length: int, path: str, with_mismatched: bool) -> Labelled:
    s = setup
    sequences = encode_sequences(s.tokenizer, s.task, [r["prompt"] for r in rows], [r["completion"] for r in rows],
                                 stop_token(s.tokenizer, s.model), max_length, [r["where"] for r in rows],
                                 "dpo.max_length")
    mismatched = []
    if with_mismatched:
        for seq, j in zip(sequences, mismatched_partners(rows, path)):
            room = max_length - len(seq.prompt)
            completion = sequences[j].completion
            mismatched.append(Sequence(seq.prompt, completion[:room], sequences[j].truncated or len(completion) > room))
    return Labelled(rows, sequences, torch.tensor([r["desirable"] for r in rows]), mismatched)


class KTOMethod(CachedReference, CursorMethod):
    method_name = "kto"

    @classmethod
    def prepare(cls, config: Config, task: Task, reward: CompositeReward) -> dict:
        paths = {"train": config.dpo.data, "eval": config.dpo.eval_data}
        data = {split: (str(path), read_labelled(resolve_path(path, config.base_dir)) if path else [])
                for split, path in paths.items()}
        if config.dpo.eval_fraction is not None:
            path, rows = data["train"]
            train, held = split_rows(rows, config.dpo.eval_fraction, "dpo.eval_fraction")
            data = {"train": (path, train), "eval": (f"{path} (held out by dpo.eval_fraction)", held)}
        return data

    def __init__(self, setup: Setup, data: dict):
        self.setup = setup
        config = setup.config
        self.cfg, self.pad_id = config.dpo, setup.engine.pad_id
        self.data = {split: encode_labelled(setup, rows, self.cfg.max_length, path, with_mismatched=split == "train")
                     for split, (path, rows) in data.items()}
        self.reference: dict[str, torch.Tensor] | None = None  # train / train_mismatched / eval -> (N,)
        self.sampler = PromptSampler(list(range(len(self.data["train"].rows))), config.seed)
        train = config.train
        model = setup.shards.place("model", setup.model, setup.whole)
        self.optimizer = build_optimizer(trainable_parameters(model), train)
        self.modules, self.optimizers = {"model": setup.whole}, {"policy": self.optimizer}

    def _groups(self, sequences: list[Sequence], index: list[int]) -> list[list[int]]:
        lengths = [len(s) for s in sequences]
        return micro_batches(index, lengths, self.setup.step_micro_batch, by_length=True)

    def _logps(self, sequences: list[Sequence]) -> torch.Tensor:
        """The policy's summed log-prob of each sequence's completion (with gradient)."""
        logprobs, mask = token_logprobs(self.setup.model, sequences, self.pad_id, self.setup.dtype)
        return (logprobs * mask).sum(dim=1)

    @torch.no_grad()
    def _sequence_logps(self, sequences: list[Sequence], index: list[int], label: str) -> torch.Tensor:
        """(len(index),): the policy's log-prob of sequences[index[k]] at position k (an index may
        repeat: a step's batch can cross an epoch)."""
        out = torch.zeros(len(index))
        positions = list(range(len(index)))
        lengths = [len(sequences[i]) for i in index]
        groups = micro_batches(positions, lengths, self.config.train.micro_batch_size, by_length=True)
        self.setup.model.eval()
        for group in tqdm(groups, desc=f"log-probs ({label})", unit="batch", leave=False, disable=len(groups) < 4):
            out[group] = self._logps([sequences[index[k]] for k in group]).float()
        return out

    def _reference_logps(self) -> dict[str, torch.Tensor]:
        """Every sequence's log-prob under the weights the run starts from, computed before
        any update, then kept (and checkpointed)."""
        if self.reference is None:
            self.reference = {}
            for split, data in self.data.items():
                everything = list(range(len(data.rows)))
                self.reference[split] = self._sequence_logps(data.sequences, everything, f"reference, {split}")
                if data.mismatched:
                    self.reference[f"{split}_mismatched"] = self._sequence_logps(
                        data.mismatched, everything, f"reference, {split} mismatched")
        return self.reference

    def step(self, step: int, phases: Phases) -> tuple[dict, list[dict]]:
        reference, train = self._reference_logps(), self.data["train"]
        picked = self.sampler.next(self.cfg.batch_size)
        # z0: the policy's KL to the reference on this step's mismatched sequences, no gradient
        z0 = kto_reference_point(self._sequence_logps(train.mismatched, picked, "mismatched"),
                                 reference["train_mismatched"][picked])

        def loss_of(group):
            logps = self._logps([train.sequences[i] for i in group])
            losses = kto_loss(logps.float(), reference["train"][group], train.desirable[group], z0, self.cfg.beta,
                              self.cfg.kto_desirable_weight, self.cfg.kto_undesirable_weight)
            return losses.sum() / len(picked), (group, logps.detach().float())

        with phases("update"):
            update = accumulated_step(self.setup.model, self.optimizer, self._groups(train.sequences, picked),
                                      loss_of, self.config.train.max_grad_norm, self.setup.shards.ranks)
        seen = update.pop("results")
        order = [i for group, _ in seen for i in group]
        logps = torch.cat([lp for _, lp in seen])
        rewards = self.cfg.beta * (logps - reference["train"][order])
        liked = train.desirable[order]
        by_kind = {}
        for kind, rows in (("desirable", liked), ("undesirable", ~liked)):
            if rows.any():  # none of this kind in the batch: no key (a log-prob of 0 would read as certainty)
                by_kind[f"kto/reward_{kind}"] = float(rewards[rows].mean())
                by_kind[f"logps/{kind}"] = float(logps[rows].mean())
        record = {"step": step, "kto/loss": update.pop("loss/total"), **update, "kto/z0": float(z0), **by_kind,
                  "kto/desirable_share": float(liked.float().mean()),
                  "kto/truncated": sum(train.sequences[i].truncated for i in picked), "kto/epoch": self.sampler.epoch,
                  "train/nothing_to_train": 0.0}
        examples = [{"prompt": prompt_text(train.rows[i]["prompt"]), "completion": train.rows[i]["completion"],
                     "desirable": bool(d), "reward": float(r)} for i, d, r in zip(order, liked, rewards)]
        return record, examples

    def held_out(self, step: int) -> dict:
        """On dpo.eval_data: the mean implicit reward beta * log(pi / ref) of desirable and of
        undesirable completions; for completions that came as pairs, preference accuracy
        (overall and per subset) and how often the policy finds the chosen one likelier."""
        data = self.data["eval"]
        if not data.rows:
            return {}
        reference = self._reference_logps()["eval"]
        everything = list(range(len(data.rows)))
        logps = reference if step == 0 else self._sequence_logps(data.sequences, everything, "held-out")
        rewards = self.cfg.beta * (logps - reference)
        out = {f"kto_eval/reward_{kind}": float(rewards[rows].mean())
               for kind, rows in (("desirable", data.desirable), ("undesirable", ~data.desirable)) if rows.any()}
        chosen = {r["pair"]: i for i, r in enumerate(data.rows) if r["pair"] is not None and r["desirable"]}
        rejected = {r["pair"]: i for i, r in enumerate(data.rows) if r["pair"] is not None and not r["desirable"]}
        if chosen:
            c, r = [chosen[k] for k in sorted(chosen)], [rejected[k] for k in sorted(chosen)]
            out.update(pair_accuracy(rewards[c], rewards[r], logps[c], logps[r], [data.rows[i] for i in c]))
        return out

    def data_id(self) -> str:
        named = {f"{split}_{kind}": getattr(data, kind) for split, data in self.data.items()
                 for kind in ("sequences", "mismatched")}
        labels = ";".join(f"{split}:{''.join('1' if d else '0' for d in data.desirable.tolist())}"
                          for split, data in sorted(self.data.items()))
        return sequences_id(named, f"kto {labels}")

    def postfix(self, record: dict) -> dict:
        return {"loss": f"{record['kto/loss']:.3f}", "z0": f"{record['kto/z0']:.3f}",
                "s/step": f"{record['time/step_s']:.1f}"}
