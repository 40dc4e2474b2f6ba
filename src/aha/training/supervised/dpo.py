"""method: dpo. Preference optimisation on {prompt, chosen, rejected} pairs with the losses of
algorithms/preference.py (DPO/cDPO/ODPO, IPO, SimPO, ORPO, TDPO, hinge, BCO), chosen in
pair_losses.py. The reference model's log-probs of every pair are computed once, before the
first update, and kept in the checkpoints: no reference model stays in memory, and a resume
uses the same numbers. Online DPO and TDPO (whose per-token KL needs the reference's whole
distributions) keep a frozen copy of the starting weights instead."""

from __future__ import annotations

import copy

import torch
from tqdm.auto import tqdm

from aha.config import Config
from aha.config.paths import resolve_path
from aha.models.adapters import trainable_parameters
from aha.prompts import prompt_text
from aha.rewards import CompositeReward
from aha.tasks import PromptSampler, Task
from aha.tasks.split import split_rows
from aha.training.distributed import shared, summed
from aha.training.method import CursorMethod, Setup
from aha.training.optimizer import accumulated_step, build_optimizer
from aha.training.phases import Phases
from aha.training.placement import same_as_main
from aha.training.supervised.online_pairs import sampled_pairs
from aha.training.supervised.pair_losses import (
    PREFERENCE_LOSSES,
    PairLogps,
    RunningMean,
    check_score_gaps,
    implicit_rewards,
    pair_losses,
    pair_offsets,
)
from aha.training.supervised.sequences import (
    CachedReference,
    Pairs,
    encode_pairs,
    pair_micro_batches,
    read_pairs,
    sequences_id,
    token_logprobs,
)
from aha.training.supervised.token_kl import logps_and_token_kl


def pair_accuracy(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, chosen_logps: torch.Tensor,
                  rejected_logps: torch.Tensor, rows: list[dict]) -> dict:
    """Held-out pair metrics from each pair's implicit rewards and the policy's summed
    log-probs: the share ranked right (overall and per `subset` of the rows), the mean margin,
    and the share whose chosen completion the policy itself finds likelier (meaningful from
    step 0 on, where every implicit margin is a tie, and a tie counts as wrong)."""
    right = (chosen_rewards > rejected_rewards).float()
    out = {"pref_eval/accuracy": float(right.mean()),
           "pref_eval/margin": float((chosen_rewards - rejected_rewards).mean()),
           "pref_eval/likelier_chosen": float((chosen_logps > rejected_logps).float().mean())}
    for subset in sorted({str(r["subset"]) for r in rows if "subset" in r}):
        members = torch.tensor([str(r.get("subset")) == subset for r in rows])
        out[f"pref_eval/accuracy/{subset}"] = float(right[members].mean())
    return out


class PreferenceMethod(CachedReference, CursorMethod):
    method_name = "dpo"

    @classmethod
    def prepare(cls, config: Config, task: Task, reward: CompositeReward) -> dict:
        read = lambda path: read_pairs(resolve_path(path, config.base_dir), with_margin=False) if path else []
        rows = {"train": read(config.dpo.data), "eval": read(config.dpo.eval_data)}
        if config.dpo.eval_fraction is not None:
            rows["train"], rows["eval"] = split_rows(rows["train"], config.dpo.eval_fraction, "dpo.eval_fraction")
        if config.dpo.offset != "none":  # online pairs carry the run's reward of both samples
            check_score_gaps(rows["train"], "dpo.offset")
        return rows

    def __init__(self, setup: Setup, rows: dict):
        self.setup = setup
        config = setup.config
        self.cfg, self.pad_id = config.dpo, setup.engine.pad_id
        self.kind = PREFERENCE_LOSSES[self.cfg.loss]
        self.needs_reference = self.kind.reference
        self.pairs = {split: encode_pairs(setup, found, self.cfg.max_length, "dpo.max_length") for split,
                      found in rows.items()}
        self.reference: dict[str, torch.Tensor] | None = None  # split_chosen / split_rejected -> (N,)
        self.ref_model = None  # offline: the reference log-probs are computed before the first update instead
        if (self.cfg.online or self.kind.token_kl) and self.needs_reference:  # the starting weights, frozen
            self.ref_model = copy.deepcopy(setup.model).requires_grad_(False).eval()
        if self.cfg.online:  # pairs sampled from the policy, scored against the starting weights
            self.sampler = PromptSampler(setup.task.train, config.seed)
        else:
            self.sampler = PromptSampler(list(range(len(self.pairs["train"].rows))), config.seed)
        self.bco_shift = RunningMean()  # bco_pair's reward shift delta
        train = config.train
        model = setup.shards.place("model", setup.model, setup.whole)
        if self.ref_model is not None:  # TDPO's reference runs beside the policy on every rank
            same_as_main(self.ref_model, setup.shards.ranks)
        self.optimizer = build_optimizer(trainable_parameters(model), train)
        self.modules, self.optimizers = {"model": setup.whole}, {"policy": self.optimizer}

    def _logps(self, model, pairs: Pairs, index: list[int]) -> PairLogps:
        """model's summed log-probs of the chosen and rejected completions of pairs[index]."""
        seqs = [pairs.chosen[i] for i in index] + [pairs.rejected[i] for i in index]
        logprobs, mask = token_logprobs(model, seqs, self.pad_id, self.setup.dtype)
        sums, tokens, k = (logprobs * mask).sum(dim=1), mask.sum(dim=1), len(index)
        return PairLogps(sums[:k], sums[k:], tokens[:k], tokens[k:])

    def _train_logps(self, pairs: Pairs, index: list[int]) -> PairLogps:
        """The policy's log-probs of pairs[index], with gradient; for TDPO also the live
        reference's sums and each completion's sequential KL."""
        if not self.kind.token_kl:
            return self._logps(self.setup.model, pairs, index)
        seqs = [pairs.chosen[i] for i in index] + [pairs.rejected[i] for i in index]
        logps, ref, kl = logps_and_token_kl(self.setup.model, self.ref_model, seqs, self.pad_id, self.setup.dtype)
        tokens, k = torch.tensor([float(len(s.completion)) for s in seqs]), len(index)
        return PairLogps(logps[:k], logps[k:], tokens[:k], tokens[k:], ref[:k], ref[k:], kl[:k], kl[k:])

    @torch.no_grad()
    def _sequence_logps(self, model, pairs: Pairs, label: str) -> tuple[torch.Tensor, torch.Tensor]:
        chosen, rejected = torch.zeros(len(pairs.rows)), torch.zeros(len(pairs.rows))
        model.eval()
        groups = pair_micro_batches(pairs, list(range(len(pairs.rows))), self.config.train.micro_batch_size)
        for group in tqdm(groups, desc=f"log-probs ({label})", unit="batch", leave=False, disable=len(groups) < 4):
            p = self._logps(model, pairs, group)
            chosen[group], rejected[group] = p.chosen.float(), p.rejected.float()
        return chosen, rejected

    def _reference_logps(self) -> dict[str, torch.Tensor]:
        """The file pairs' reference log-probs: computed from the weights the run starts
        from, before any update, then kept (and checkpointed)."""
        if self.reference is None:
            self.reference = {}
            for split, pairs in self.pairs.items():
                if split == "train" and self.kind.token_kl:  # TDPO reads its reference live while training
                    continue
                self.reference[f"{split}_chosen"], self.reference[f"{split}_rejected"] = self._sequence_logps(
                    self.ref_model or self.setup.model, pairs, f"reference, {split} pairs")
        return self.reference

    def _with_reference(self, p: PairLogps, split: str, index: list[int]) -> PairLogps:
        if self.needs_reference and p.ref_chosen is None:  # TDPO's training pairs come with theirs
            ref = self._reference_logps()
            p.ref_chosen, p.ref_rejected = ref[f"{split}_chosen"][index], ref[f"{split}_rejected"][index]
        return p

    def _step_pairs(self) -> tuple[Pairs, list[int], dict, dict]:
        """This step's pairs, which of them to train on, their reference log-probs by
        pair index (empty without a reference) and statistics of how they were found."""
        if not self.cfg.online:
            if self.needs_reference and self.ref_model is None:
                self._reference_logps()  # before the first update changes the weights
            picked = self.sampler.next(self.cfg.batch_size)
            return self.pairs["train"], picked, {}, {"pref/epoch": self.sampler.epoch}
        # online: rank 0 samples and scores the pairs alone; every learner rank trains on them
        return shared(self._online_pairs() if self.setup.is_main else None, self.setup.shards.ranks)

    def _online_pairs(self) -> tuple[Pairs, list[int], dict, dict]:
        s = self.setup
        rows, chosen, rejected, stats = sampled_pairs(s.engine, s.task, self.sampler, s.reward, self.cfg.batch_size,
                                                      self.cfg.online_samples)
        pairs, picked, reference = Pairs(rows, chosen, rejected), list(range(len(rows))), {}
        if self.needs_reference and rows and not self.kind.token_kl:
            ref_chosen, ref_rejected = self._sequence_logps(self.ref_model, pairs, "reference")
            reference = {i: (ref_chosen[i], ref_rejected[i]) for i in picked}
        return pairs, picked, reference, {**stats, "pref/epoch": self.sampler.epoch}

    def _group_logps(self, train: Pairs, group: list[int], reference: dict, counted: bool = True) -> PairLogps:
        """A micro-batch's pairs with all their loss reads: the reference's log-probs (cached,
        sampled this step, or TDPO's live ones), ODPO's offsets, BCO's reward shift (counted:
        False for a learner rank's repeated pass, whose rewards are not the micro-batch's)."""
        p = self._train_logps(train, group)
        if not self.cfg.online:
            p = self._with_reference(p, "train", group)
        elif self.needs_reference and p.ref_chosen is None:
            p.ref_chosen = torch.stack([reference[i][0] for i in group])
            p.ref_rejected = torch.stack([reference[i][1] for i in group])
        p.offset = pair_offsets(train.rows, group, self.cfg)
        if self.cfg.loss == "bco_pair":  # the running mean includes this micro-batch, as TRL's
            p.delta = self.bco_shift.update(self._micro_batch_reward(p, counted))
        return p

    def _micro_batch_reward(self, p: PairLogps, counted: bool) -> float:
        """The mean implicit reward of a micro-batch's chosen and rejected completions; with
        several learner ranks, over every rank's part of it (a collective)."""
        rewards = torch.cat(implicit_rewards(p, self.cfg)).detach()
        ranks = self.setup.shards.ranks
        if not ranks.distributed:
            return float(rewards.mean())
        total = summed({"sum": float(rewards.double().sum()) if counted else 0.0,
                        "count": float(len(rewards)) if counted else 0.0}, ranks)
        return total["sum"] / total["count"]

    def _loss_metrics(self, seen: list[PairLogps]) -> dict:
        """What a loss reads beyond the log-probs: TDPO's sequential KL per completion, ODPO's
        mean offset, BCO's reward shift."""
        out = {}
        if self.kind.token_kl:
            out["tdpo/kl_chosen"] = float(torch.cat([p.kl_chosen.detach() for p in seen]).mean())
            out["tdpo/kl_rejected"] = float(torch.cat([p.kl_rejected.detach() for p in seen]).mean())
        if self.cfg.offset != "none":
            out["odpo/offset"] = float(torch.cat([p.offset for p in seen]).mean())
        if self.cfg.loss == "bco_pair":
            out["bco/delta"] = self.bco_shift.mean
        return out

    def step(self, step: int, phases: Phases) -> tuple[dict, list[dict]]:
        with phases("prepare"):  # the step's pairs: sampled and scored when online, and reference log-probs
            train, picked, reference, found = self._step_pairs()
        if not picked:  # online: every prompt's samples scored the same
            return {"step": step, **found, "train/nothing_to_train": 1.0}, []

        def loss_of(group, factor):
            p = self._group_logps(train, group, reference, counted=factor > 0)
            return pair_losses(p, self.cfg).sum() / len(picked), (group, p.detached())

        groups = pair_micro_batches(train, picked, self.config.train.micro_batch_size,
                                    self.setup.shards.ranks.world_size)
        with phases("update"):
            update = accumulated_step(self.setup.model, self.optimizer, groups, loss_of,
                                      self.config.train.max_grad_norm, self.setup.shards.ranks, with_factor=True)
        seen = update.pop("results")
        chosen_r, rejected_r = (torch.cat(x).detach() for x in zip(*(implicit_rewards(p, self.cfg) for _, p in seen)))
        chosen_lp = torch.cat([p.chosen.detach() for _, p in seen])
        rejected_lp = torch.cat([p.rejected.detach() for _, p in seen])
        order = [i for group, _ in seen for i in group]
        truncated = sum(train.chosen[i].truncated + train.rejected[i].truncated for i in picked)
        record = {"step": step, "pref/loss": update.pop("loss/total"), **update,
                  "pref/accuracy": float((chosen_r > rejected_r).float().mean()),
                  "pref/margin": float((chosen_r - rejected_r).mean()), "pref/reward_chosen": float(chosen_r.mean()),
                  "pref/reward_rejected": float(rejected_r.mean()), "logps/chosen": float(chosen_lp.mean()),
                  "logps/rejected": float(rejected_lp.mean()), "pref/truncated": truncated, **found,
                  "train/nothing_to_train": 0.0, **self._loss_metrics([p for _, p in seen])}
        examples = [{"prompt": prompt_text(train.rows[i]["prompt"]), "chosen": train.rows[i]["chosen"],
                     "rejected": train.rows[i]["rejected"], "margin": float(c - r)}
                    for i, c, r in zip(order, chosen_r, rejected_r)]
        return record, examples

    def held_out(self, step: int) -> dict:
        """Preference accuracy on dpo.eval_data: the share of held-out pairs whose chosen
        completion gets the higher implicit reward (overall and per subset)."""
        pairs = self.pairs["eval"]
        if not pairs.rows:
            return {}
        if self.needs_reference and step == 0 and self.reference is None:  # no update yet: policy = reference
            chosen, rejected = (self._reference_logps()[f"eval_{side}"] for side in ("chosen", "rejected"))
        else:
            chosen, rejected = self._sequence_logps(self.setup.model, pairs, "held-out pairs")
        index = list(range(len(pairs.rows)))
        tokens = lambda seqs: torch.tensor([float(len(s.completion)) for s in seqs])
        p = self._with_reference(PairLogps(chosen, rejected, tokens(pairs.chosen), tokens(pairs.rejected)), "eval",
                                 index)
        chosen_r, rejected_r = implicit_rewards(p, self.cfg)
        return pair_accuracy(chosen_r, rejected_r, p.chosen, p.rejected, pairs.rows)

    def state(self) -> dict:
        return {**super().state(), "bco_shift": self.bco_shift.state()}

    def restore(self, state: dict, extra: dict, metrics: list[dict]) -> None:
        super().restore(state, extra, metrics)
        if "bco_shift" in state:
            self.bco_shift.load_state(state["bco_shift"])

    def data_id(self) -> str:
        return sequences_id({f"{split}_{side}": getattr(pairs, side) for split, pairs in self.pairs.items()
                             for side in ("chosen", "rejected")}, "pairs")

    def reference_required(self) -> bool:  # online runs keep the starting weights instead
        return self.needs_reference and self.ref_model is None

    def postfix(self, record: dict) -> dict:
        if "pref/loss" not in record:  # online: no prompt gave a pair this step
            return {"pairs": 0, "s/step": f"{record['time/step_s']:.1f}"}
        return {"loss": f"{record['pref/loss']:.3f}", "acc": f"{record['pref/accuracy']:.2f}",
                "margin": f"{record['pref/margin']:.3f}", "s/step": f"{record['time/step_s']:.1f}"}
