"""method: rm. A reward model trained on {prompt, chosen, rejected} pairs with the
Bradley-Terry loss -log sigma(r_w - r_l - margin) (optionally PCRM's cap on the gap,
algorithms/reward_model.py). Its checkpoints hold the body as "model" (a loadable model
folder), the heads as "reward_head" and a reward_model.json saying how to score, so a run
folder is the `model:` of a reward (`reward: [{model: runs/rm}]`, rewards/learned.py)."""

from __future__ import annotations

import json

import torch

from aha.algorithms.preference import bradley_terry_loss
from aha.algorithms.reward_model import angular_similarity, bootstrap_weights, length_ratio, pcrm_cap, pcrm_upper_loss
from aha.config import Config
from aha.config.paths import resolve_path
from aha.models.adapters import trainable_parameters
from aha.models.reward_model import RewardModel, ensemble_score, reward_head
from aha.prompts import prompt_text
from aha.rewards import CompositeReward
from aha.tasks import PromptSampler, Task
from aha.training.distributed import shared
from aha.training.method import CursorMethod, Setup
from aha.training.optimizer import accumulated_step, build_optimizer
from aha.training.phases import Phases
from aha.training.supervised.sequences import Pairs, encode_pairs, pair_micro_batches, read_pairs


class RMMethod(CursorMethod):
    generates = False  # a reward model writes no answers: the loop's greedy evaluation does not apply

    @classmethod
    def prepare(cls, config: Config, task: Task, reward: CompositeReward) -> dict:
        rm = config.rm
        train = read_pairs(resolve_path(rm.data, config.base_dir), rm.margin == "data")
        held = read_pairs(resolve_path(rm.eval_data, config.base_dir), False) if rm.eval_data else []
        return {"train": train, "eval": held}

    def __init__(self, setup: Setup, rows: dict):
        self.setup = setup
        config = setup.config
        self.cfg = config.rm
        head = reward_head(setup.model.config.hidden_size, self.cfg.heads, config.seed,
                           getattr(setup.model.config, "initializer_range", 0.02))
        self.rm = RewardModel(setup.model, head, setup.engine.pad_id)
        self.pairs = {split: encode_pairs(setup, found, self.cfg.max_length, "rm.max_length") for split,
                      found in rows.items()}
        n = len(self.pairs["train"].rows)
        self.sampler = PromptSampler(list(range(n)), config.seed)
        self.weights = bootstrap_weights(n, self.cfg.heads, config.seed)  # (n, heads)
        self.margins = torch.tensor([float(r.get("margin", 0.0)) if self.cfg.margin == "data" else 0.0
                                     for r in self.pairs["train"].rows])
        # from the weights the run starts with, which only rank 0 holds before they are placed
        self.caps = shared(self._pcrm_caps() if self.cfg.pcrm and setup.is_main else None, setup.shards.ranks)
        train = config.train
        setup.shards.place("reward_model", self.rm)
        self.optimizer = build_optimizer(trainable_parameters(self.rm), train)
        whole = setup.shards.whole("reward_model")  # rank 0's whole copy: what checkpoints save
        self.modules = {"model": whole.lm, "reward_head": whole.head} if whole is not None else {}
        self.optimizers = {"reward_model": self.optimizer}

    def _pcrm_caps(self) -> torch.Tensor:
        """(n, 1) PCRM's delta* per training pair, from priors computed once: the length ratio
        of the completions, or the angular similarity of the starting body's embeddings
        (recomputed identically on resume: __init__ runs before the checkpoint's weights load)."""
        pairs, c = self.pairs["train"], self.cfg
        if c.pcrm_similarity == "length_ratio":
            similarity = torch.tensor([length_ratio(a.completion, b.completion) for a,
                                       b in zip(pairs.chosen, pairs.rejected)])
        else:
            similarity = torch.zeros(len(pairs.rows))
            with torch.no_grad():
                for group in pair_micro_batches(pairs, list(range(len(pairs.rows))),
                                                self.config.train.micro_batch_size):
                    _, hidden = self.rm(pairs.tokens(group), self.setup.dtype, with_hidden=True)
                    similarity[group] = angular_similarity(hidden[:len(group)], hidden[len(group):])
        return pcrm_cap(similarity, c.pcrm_beta1, c.pcrm_beta2, c.pcrm_beta3).unsqueeze(1)

    def _rewards(self, pairs: Pairs, group: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(k, heads) rewards of the chosen and of the rejected completions of pairs[group]."""
        rewards = self.rm(pairs.tokens(group), self.setup.dtype)
        return rewards[:len(group)], rewards[len(group):]

    def _loss(self, chosen: torch.Tensor, rejected: torch.Tensor, group: list[int]) -> torch.Tensor:
        """(k, heads) per pair and head: Bradley-Terry with the pair's margin, + PCRM's cap term."""
        shape = chosen.shape
        margin = self.margins[group].unsqueeze(1).expand(shape)
        loss = bradley_terry_loss(chosen.reshape(-1), rejected.reshape(-1), margin.reshape(-1)).view(shape)
        if self.caps is not None:
            loss = loss + pcrm_upper_loss(chosen, rejected, self.caps[group].expand(shape))
        return loss

    def step(self, step: int, phases: Phases) -> tuple[dict, list[dict]]:
        picked = self.sampler.next(self.cfg.batch_size)
        train = self.pairs["train"]
        # each head's loss is its bootstrap-weighted mean over the batch; the heads are averaged
        norm = self.weights[picked].sum(dim=0).clamp(min=1.0) * self.cfg.heads

        def loss_of(group):
            chosen, rejected = self._rewards(train, group)
            return (self._loss(chosen, rejected, group) * self.weights[group] / norm).sum(), \
                (group, chosen.detach(), rejected.detach())

        groups = pair_micro_batches(train, picked, self.config.train.micro_batch_size,
                                    self.setup.shards.ranks.world_size)
        with phases("update"):
            update = accumulated_step(self.rm, self.optimizer, groups, loss_of, self.config.train.max_grad_norm,
                                      self.setup.shards.ranks)
        seen = update.pop("results")
        order = [i for group, _, _ in seen for i in group]
        chosen, rejected = torch.cat([c for _, c, _ in seen]), torch.cat([r for _, _, r in seen])
        score_c, score_r = self._score(chosen), self._score(rejected)
        record = {"step": step, "rm/loss": update.pop("loss/total"), **update,
                  "rm/accuracy": float((score_c > score_r).float().mean()),
                  "rm/margin": float((score_c - score_r).mean()),
                  "rm/reward_chosen": float(score_c.mean()), "rm/reward_rejected": float(score_r.mean()),
                  "rm/truncated": sum(train.chosen[i].truncated + train.rejected[i].truncated for i in picked),
                  "rm/epoch": self.sampler.epoch}
        if self.cfg.heads > 1:  # how much the heads disagree on a pair's gap
            record["rm/head_std"] = float((chosen - rejected).std(dim=1, unbiased=False).mean())
        if self.caps is not None:
            record["rm/pcrm_cap"] = float(self.caps[picked].mean())
        examples = [{"prompt": prompt_text(train.rows[i]["prompt"]), "chosen": train.rows[i]["chosen"],
                     "rejected": train.rows[i]["rejected"], "score_chosen": float(c), "score_rejected": float(r)}
                    for i, c, r in zip(order, score_c, score_r)]
        return record, examples

    def _score(self, rewards: torch.Tensor) -> torch.Tensor:
        return ensemble_score(rewards, self.cfg.ensemble_score, self.cfg.ensemble_k)

    def held_out(self, step: int) -> dict:
        """Pairwise accuracy on rm.eval_data: the share of held-out pairs whose chosen
        completion scores higher (the ensemble score, as the reward uses it), overall and
        per subset, and the mean score gap."""
        pairs = self.pairs["eval"]
        if not pairs.rows:
            return {}
        n = len(pairs.rows)
        score_c, score_r = torch.zeros(n), torch.zeros(n)
        self.rm.eval()
        with torch.no_grad():
            for group in pair_micro_batches(pairs, list(range(n)), self.config.train.micro_batch_size):
                chosen, rejected = self._rewards(pairs, group)
                score_c[group], score_r[group] = self._score(chosen), self._score(rejected)
        right = (score_c > score_r).float()
        out = {"rm_eval/accuracy": float(right.mean()), "rm_eval/margin": float((score_c - score_r).mean())}
        for subset in sorted({str(r["subset"]) for r in pairs.rows if "subset" in r}):
            rows = torch.tensor([str(r.get("subset")) == subset for r in pairs.rows])
            out[f"rm_eval/accuracy/{subset}"] = float(right[rows].mean())
        return out

    def checkpoint_files(self) -> dict[str, str]:
        """reward_model.json: what rewards/learned.py needs to score as this run trained."""
        task = self.setup.task
        about = {"method": "rm", "heads": self.cfg.heads, "score": self.cfg.ensemble_score, "k": self.cfg.ensemble_k,
                 "max_length": self.cfg.max_length, "system_prompt": task.system_prompt, "few_shot": task.few_shot,
                 "base_model": self.config.model}
        return {"reward_model.json": json.dumps(about, indent=1)}

    def postfix(self, record: dict) -> dict:
        return {"loss": f"{record['rm/loss']:.3f}", "acc": f"{record['rm/accuracy']:.2f}",
                "margin": f"{record['rm/margin']:.2f}", "s/step": f"{record['time/step_s']:.1f}"}
