"""method: prm. A process reward model trained on step-labelled solutions {prompt, steps,
labels} (Lightman et al. 2023, "Let's Verify Step by Step"): a scalar head read at the token
that closes each step (models/process_reward.py), binary cross-entropy with logits against
the step's 0/1 label, averaged over the batch's labelled steps. Its checkpoints hold the body
as "model", the head as "reward_head" and a process_reward_model.json saying how to score, so
a run folder is the `model:` of a reward (`reward: [{model: runs/prm, args: {aggregate: min}}]`,
rewards/process_reward.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from aha.config import Config
from aha.config.paths import resolve_path
from aha.errors import TaskError
from aha.models.adapters import trainable_parameters
from aha.models.compute import stop_token
from aha.models.process_reward import ProcessRewardModel, encode_steps
from aha.models.reward_model import reward_head
from aha.prompts import prompt_text
from aha.rewards import CompositeReward
from aha.rewards.process_reward import DESCRIPTION  # in every checkpoint: rewards/learned.py tells a PRM by it
from aha.tasks import PromptSampler, Task, encode_prompts
from aha.training.method import CursorMethod, Setup
from aha.training.optimizer import accumulated_step, build_optimizer
from aha.training.phases import Phases
from aha.training.supervised.sequences import micro_batches, read_examples


def read_solutions(path, separator: str) -> list[dict]:
    """read_examples' checks (file:line errors), and: steps a non-empty list of non-blank
    strings without the separator in them (it would split a step in two when a completion is
    scored), labels a list of 0/1, one a step."""
    rows = read_examples(path, ())
    for row in rows:
        where, steps, labels = row["where"], row.get("steps"), row.get("labels")
        if not isinstance(steps, list) or not steps:
            raise TaskError(f"{where}: steps must be a non-empty list of strings, got {steps!r}")
        for k, step in enumerate(steps):
            if not isinstance(step, str) or not step.strip():
                raise TaskError(f"{where}: steps[{k}] must be a non-empty string, got {step!r}")
            if separator in step:
                raise TaskError(f"{where}: steps[{k}] holds the step separator {separator!r}: {step!r}")
        if not isinstance(labels, list) or len(labels) != len(steps):
            raise TaskError(f"{where}: labels must be a list with one 0/1 label a step ({len(steps)} steps), got "
                            f"{labels!r}")
        for k, label in enumerate(labels):
            if isinstance(label, bool) or label not in (0, 1):
                raise TaskError(f"{where}: labels[{k}] must be 0 or 1, got {label!r}")
    return rows


@dataclass(frozen=True)
class Solution:
    tokens: list[int]  # chat-templated prompt + completion + stop, cut to prm.max_length
    ends: list[int]  # positions in tokens of the tokens closing the steps that fit
    labels: torch.Tensor  # (len(ends),) float labels of those steps
    cut: int  # steps that did not close within max_length (not scored)


def first_error(flags: list[bool]) -> int | None:
    """Index of the first False (a wrong step), None when every step is right."""
    return next((k for k, ok in enumerate(flags) if not ok), None)


class PRMMethod(CursorMethod):
    generates = False  # a process reward model writes no answers: the loop's greedy evaluation does not apply

    @classmethod
    def prepare(cls, config: Config, task: Task, reward: CompositeReward) -> dict:
        prm = config.prm
        train = read_solutions(resolve_path(prm.data, config.base_dir), prm.step_separator)
        held = read_solutions(resolve_path(prm.eval_data, config.base_dir), prm.step_separator) if prm.eval_data else []
        return {"train": train, "eval": held}

    def __init__(self, setup: Setup, rows: dict):
        self.setup = setup
        config = setup.config
        self.cfg = config.prm
        head = reward_head(setup.model.config.hidden_size, 1, config.seed,
                           getattr(setup.model.config, "initializer_range", 0.02))
        self.prm = ProcessRewardModel(setup.model, head, setup.engine.pad_id)
        self.rows = rows
        self.solutions = {split: self._encode(found) for split, found in rows.items()}
        self.sampler = PromptSampler(list(range(len(rows["train"]))), config.seed)
        train = config.train
        setup.shards.place("process_reward_model", self.prm)
        self.optimizer = build_optimizer(trainable_parameters(self.prm), train)
        whole = setup.shards.whole("process_reward_model")  # rank 0's whole copy: what checkpoints save
        self.modules = {"model": whole.lm, "reward_head": whole.head} if whole is not None else {}
        self.optimizers = {"process_reward_model": self.optimizer}

    def _encode(self, rows: list[dict]) -> list[Solution]:
        """Prompts through the chat template (as the reward will see them), the steps joined by
        the separator + the stop token; a prompt that leaves no room is an error (file:line)."""
        s, limit, stop = self.setup, self.cfg.max_length, stop_token(self.setup.tokenizer, self.setup.model)
        prompts = encode_prompts(s.tokenizer, s.task, [{"prompt": r["prompt"]} for r in rows])
        out = []
        for row, prompt in zip(rows, prompts):
            if len(prompt) >= limit:
                raise TaskError(f"{row['where']}: the prompt is {len(prompt)} tokens, leaving no room for a solution "
                                f"within prm.max_length={limit}; raise it or shorten the prompt")
            completion, ends = encode_steps(s.tokenizer, row["steps"], self.cfg.step_separator, stop)
            kept = [len(prompt) + e for e in ends if len(prompt) + e < limit]
            out.append(Solution((prompt + completion)[:limit], kept,
                                torch.tensor(row["labels"][:len(kept)], dtype=torch.float),
                                len(ends) - len(kept)))
        return out

    def _groups(self, solutions: list[Solution], picked: list[int], size: int | None = None) -> list[list[int]]:
        """train.micro_batch_size solutions per forward (size: so many instead), like lengths together."""
        return micro_batches(picked, [len(s.tokens) for s in solutions], size or self.config.train.micro_batch_size,
                             by_length=True)

    def _logits(self, solutions: list[Solution], group: list[int]) -> torch.Tensor:
        return self.prm([solutions[i].tokens for i in group], [solutions[i].ends for i in group], self.setup.dtype)

    def step(self, step: int, phases: Phases) -> tuple[dict, list[dict]]:
        picked = self.sampler.next(self.cfg.batch_size)
        train = self.solutions["train"]
        norm = max(1, sum(len(train[i].ends) for i in picked))  # the mean over the batch's labelled steps

        def loss_of(group):
            logits = self._logits(train, group)
            labels = torch.cat([train[i].labels for i in group])
            return F.binary_cross_entropy_with_logits(logits, labels, reduction="sum") / norm, (group, logits.detach())

        # a training pass's micro-batch holds one per learner rank (rank_passes splits it)
        groups = self._groups(train, picked, self.setup.step_micro_batch)
        with phases("update"):
            update = accumulated_step(self.prm, self.optimizer, groups, loss_of, self.config.train.max_grad_norm,
                                      self.setup.shards.ranks)
        seen = update.pop("results")
        order = [i for group, _ in seen for i in group]
        logits = torch.cat([group_logits for _, group_logits in seen])
        labels = torch.cat([train[i].labels for i in order])
        record = {"step": step, "prm/loss": update.pop("loss/total"), **update,
                  "prm/step_accuracy": float(((logits > 0).float() == labels).float().mean()) if len(labels) else 0.0,
                  "prm/steps": len(labels), "prm/truncated_steps": sum(train[i].cut for i in picked),
                  "prm/epoch": self.sampler.epoch}
        probs = torch.sigmoid(logits).split([len(train[i].ends) for i in order])
        examples = [{"prompt": prompt_text(self.rows["train"][i]["prompt"]), "steps": self.rows["train"][i]["steps"],
                     "labels": self.rows["train"][i]["labels"], "step_probs": [round(float(p), 4) for p in ps]}
                    for i, ps in zip(order, probs)]
        return record, examples

    def held_out(self, step: int) -> dict:
        """On prm.eval_data: step accuracy (sigmoid > 0.5 vs the label) and loss over every
        scored step; over the solutions all of whose steps fit, the solution-level accuracy of
        the min-form (right when min step probability > 0.5) and of the sum-form (when the sum
        exceeds half the step count, i.e. the mean > 0.5), each against whether all labels
        are 1, and the first-error accuracy (the first step with p < 0.5, or none, is the
        first labelled 0, or none)."""
        solutions = self.solutions["eval"]
        if not solutions:
            return {}
        self.prm.eval()
        probs: list[torch.Tensor] = [torch.zeros(0)] * len(solutions)
        with torch.no_grad():
            for group in self._groups(solutions, list(range(len(solutions)))):
                logits = self._logits(solutions, group)
                for i, p in zip(group, torch.sigmoid(logits).split([len(solutions[i].ends) for i in group])):
                    probs[i] = p
        p_all, y_all = torch.cat(probs), torch.cat([s.labels for s in solutions])
        whole = [(p, s.labels) for p, s in zip(probs, solutions) if s.cut == 0]
        right = lambda flags: float(sum(flags)) / max(1, len(flags))
        return {"prm_eval/step_accuracy": right(((p_all > 0.5).float() == y_all).tolist()),
                "prm_eval/loss": float(F.binary_cross_entropy(p_all.double(), y_all.double())) if len(y_all) else 0.0,
                "prm_eval/solution_accuracy_min": right([bool(p.min() > 0.5) == bool(y.all()) for p, y in whole]),
                "prm_eval/solution_accuracy_sum": right([bool(p.sum() > 0.5 * len(p)) == bool(y.all())
                                                         for p, y in whole]),
                "prm_eval/first_error_accuracy": right([first_error((p > 0.5).tolist())
                                                        == first_error((y > 0.5).tolist()) for p, y in whole]),
                "prm_eval/solutions": len(whole)}

    def checkpoint_files(self) -> dict[str, str]:
        """process_reward_model.json: what rewards/learned.py needs to score as this run trained."""
        task = self.setup.task
        about = {"method": "prm", "separator": self.cfg.step_separator, "max_length": self.cfg.max_length,
                 "system_prompt": task.system_prompt, "few_shot": task.few_shot, "base_model": self.config.model}
        return {DESCRIPTION: json.dumps(about, indent=1)}

    def postfix(self, record: dict) -> dict:
        return {"loss": f"{record['prm/loss']:.3f}", "acc": f"{record['prm/step_accuracy']:.2f}",
                "s/step": f"{record['time/step_s']:.1f}"}
