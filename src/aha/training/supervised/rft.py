"""method: rft. Expert iteration / rejection-sampling fine-tuning (STaR, Zelikman et al. 2022;
RFT, Yuan et al. 2023; "expert iteration" in Havrilla et al. 2024): each round samples
rft.samples completions for each of rft.prompts_per_round training prompts from the current
policy, keeps those the run's reward passes (algorithms/rejection.py), and takes
rft.steps_per_round supervised steps on them (the response tokens' mean NLL, as method=sft).

The kept completions are the engine's own token ids after the prompt's: nothing is
re-tokenised. With rft.rationalize, STaR's rationalisation: a prompt none of whose samples
passed is asked again with its answer shown (rft.hint), and the retries that pass are learned
as answers to the prompt without the hint. Training continues from the current weights each
round (as Havrilla et al.; STaR restarts from the base model, which this does not do)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from aha.algorithms.rejection import eligible, kept_rows, unsolved_groups
from aha.config import Config, RFTConfig
from aha.models.adapters import trainable_parameters
from aha.prompts import hinted, prompt_text
from aha.rewards import CompositeReward
from aha.rollout import Rollouts
from aha.tasks import PromptSampler, Task, check_answers, encode_prompts
from aha.training.distributed import shared
from aha.training.method import CursorMethod, Setup
from aha.training.optimizer import accumulated_step, build_optimizer
from aha.training.phases import Phases
from aha.training.supervised.sequences import Sequence, micro_batches, token_logprobs


@dataclass
class Round:
    """One round's kept completions and where the steps are in them."""

    number: int
    sequences: list[Sequence]
    rows: list[dict]  # {prompt, completion, reward, rationalized} of each kept completion, for samples.jsonl
    order: list[int]  # the shuffled order the steps take them in
    position: int = 0  # into order
    steps: int = 0  # optimizer steps taken on this round
    stats: dict = field(default_factory=dict)  # what its sampling measured, logged at its first step

    def next_batch(self, size: int) -> list[int]:
        """The next `size` kept completions, wrapping around (a round may keep fewer than a batch)."""
        picked = [self.order[(self.position + i) % len(self.order)] for i in range(min(size, len(self.order)))]
        self.position = (self.position + len(picked)) % len(self.order)
        return picked


def completion_of(ro: Rollouts, row: int) -> tuple[int, ...]:
    """The tokens the engine sampled for a row, through its stop token."""
    return tuple(ro.completion_ids[row, :int(ro.completion_mask[row].sum())].tolist())


@dataclass
class Sampled:
    """One generate-and-score pass over some prompts: what passed, and the rows kept."""

    ro: Rollouts
    totals: list[float]
    passed: list[bool]
    kept: list[int]


class RFTMethod(CursorMethod):
    @classmethod
    def prepare(cls, config: Config, task: Task, reward: CompositeReward) -> None:
        """Rationalisation shows each prompt's answer: every training sample needs one."""
        if config.rft.rationalize:
            check_answers(task, "rft.rationalize", "rft.rationalize=false")

    def __init__(self, setup: Setup, prepared=None):
        self.setup = setup
        self.cfg: RFTConfig = setup.config.rft
        self.pad_id = setup.engine.pad_id
        self.sampler = PromptSampler(setup.task.train, setup.config.seed)
        model = setup.shards.place("model", setup.model, setup.whole)
        self.optimizer = build_optimizer(trainable_parameters(model), setup.config.train)
        self.modules, self.optimizers = {"model": setup.whole}, {"policy": self.optimizer}
        self.round: Round | None = None
        self.sampled_total = 0  # completions sampled so far (retries too): the budget a comparison is made at

    def _sample(self, samples: list[dict], asked: list[dict], phases: Phases) -> tuple[list[list[int]], Sampled]:
        """Generate rft.samples completions for each of `asked` and score them against `samples`
        (the same problems; `asked` may show the answer)."""
        engine, cfg = self.setup.engine, self.cfg
        prompts = encode_prompts(engine.tokenizer, self.setup.task, asked)
        with phases("generate"):
            ro = engine.generate(prompts, group_size=cfg.samples)
        with phases("score"):
            result = self.setup.reward.score(ro.texts, [samples[i] for i in ro.prompt_index.tolist()],
                                             ro.lengths().tolist())
        totals = result.total.tolist()
        passed = eligible(totals, result.failed.tolist(), ro.truncated.tolist(), cfg.threshold)
        self.sampled_total += len(ro)
        return prompts, Sampled(ro, totals, passed, kept_rows(passed, ro.texts, cfg.samples, cfg.keep))

    def _new_round(self, phases: Phases) -> Round:
        cfg = self.cfg
        number = 1 if self.round is None else self.round.number + 1
        samples = self.sampler.next(cfg.prompts_per_round)
        prompts, first = self._sample(samples, samples, phases)
        G = cfg.samples
        sequences, rows = [], []

        def keep(sampled: Sampled, prompt_of, rationalized: bool) -> None:
            for row in sampled.kept:
                sequences.append(Sequence(tuple(prompts[prompt_of(row // G)]), completion_of(sampled.ro, row), False))
                rows.append({"prompt": prompt_text(samples[prompt_of(row // G)]["prompt"]),
                             "completion": sampled.ro.texts[row], "reward": sampled.totals[row],
                             "rationalized": rationalized})

        keep(first, lambda g: g, False)
        unsolved = unsolved_groups(first.passed, G)
        retried = 0
        if cfg.rationalize and unsolved:
            _, retry = self._sample([samples[g] for g in unsolved], [hinted(samples[g], cfg.hint) for g in unsolved],
                                    phases)
            keep(retry, lambda g: unsolved[g], True)
            retried = len(retry.ro)
        finite = [t for t in first.totals if math.isfinite(t)]
        stats = {"rft/sampled": len(first.ro) + retried, "rft/kept": len(sequences),
                 "rft/kept_frac": len(sequences) / (len(first.ro) + retried),
                 "rft/prompts_solved_frac": 1 - len(unsolved) / len(samples),
                 "rft/rationalized": sum(r["rationalized"] for r in rows), "rft/retried": retried,
                 "reward/mean": sum(finite) / len(finite) if finite else 0.0,
                 "length/mean": float(first.ro.lengths().float().mean())}
        order = list(range(len(sequences)))
        random.Random(f"{self.setup.config.seed}:rft:{number}").shuffle(order)
        return Round(number, sequences, rows, order, stats=stats)

    def step(self, step: int, phases: Phases) -> tuple[dict, list[dict]]:
        cfg = self.cfg
        if self.round is None or not self.round.sequences or self.round.steps >= cfg.steps_per_round:
            # rank 0 samples and scores the round alone; every learner rank trains on it
            self.round = shared(self._new_round(phases) if self.setup.is_main else None, self.setup.shards.ranks)
            stats = self.round.stats
        else:
            stats = {}
        current = self.round
        record = {"step": step, **stats, "rft/round": current.number, "rft/sampled_total": self.sampled_total,
                  "sft/epoch": self.sampler.epoch}
        if not current.sequences:  # nothing passed: the next step samples a new round
            return {**record, "train/nothing_to_train": 1.0}, []
        picked = current.next_batch(cfg.batch_size)
        current.steps += 1
        with phases("update"):
            update, nll, order = self._update(current.sequences, picked)
        examples = [{**current.rows[i], "nll_per_token": loss} for i, loss in zip(order, nll)]
        return {**record, "sft/loss": update.pop("loss/total"), **update, "train/nothing_to_train": 0.0}, examples

    def _update(self, sequences: list[Sequence], picked: list[int]) -> tuple[dict, list[float], list[int]]:
        """One optimizer step on the mean NLL of the picked completions' tokens (as method=sft)."""
        model, train = self.setup.model, self.setup.config.train
        tokens = sum(len(sequences[i].completion) for i in picked)
        groups = micro_batches(picked, [len(s) for s in sequences], self.setup.step_micro_batch, True)

        def loss_of(group):
            logprobs, mask = token_logprobs(model, [sequences[i] for i in group], self.pad_id, self.setup.dtype)
            per_row = -(logprobs * mask).sum(dim=1)
            return per_row.sum() / tokens, (per_row / mask.sum(dim=1)).tolist()

        update = accumulated_step(model, self.optimizer, groups, loss_of, train.max_grad_norm, self.setup.shards.ranks)
        nll = [loss for losses in update.pop("results") for loss in losses]
        update["sft/tokens"] = tokens
        return update, nll, [i for g in groups for i in g]

    def state(self) -> dict:
        return {"sampler": self.sampler.state(), "sampled_total": self.sampled_total}

    def extra_state(self) -> dict | None:
        return None if self.round is None else {"round": self.round}

    def restore(self, state: dict, extra: dict, metrics: list[dict]) -> None:
        super().restore(state, extra, metrics)
        self.sampled_total = state["sampled_total"]
        self.round = extra.get("round")

    def postfix(self, record: dict) -> dict:
        shown = {"round": record["rft/round"]}
        if "sft/loss" in record:
            shown["loss"] = f"{record['sft/loss']:.3f}"
        if "rft/kept" in record:
            shown["kept"] = record["rft/kept"]
        return {**shown, "s/step": f"{record['time/step_s']:.1f}"}

