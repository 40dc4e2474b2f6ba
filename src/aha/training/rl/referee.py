"""The policy as its own referee, in one GRPO loop (URPO: Lu et al. 2025, arXiv 2507.17515).

`referee: {verifier: numeric_answer}`: two things happen each RL step.
1. The referee rewards: every completion is shown to the live policy in a judge prompt
   (referee.template) and earns referee.weight * P(yes) / (P(yes) + P(no)) from one forward
   pass, as a reward component named referee (score_round adds it; aha.algorithms.referee).
2. The referee learns: after the step's groups are in, up to referee.prompts_per_step of its
   completions, as many the verifier marks right as wrong, become judge prompts; the engine
   samples group_size verdicts for each, a verdict scoring 1 when it agrees with the verifier;
   the groups whose verdicts differ join the step's batch and train with the same estimator
   and loss as the answers.
The referee IS the policy: nothing to checkpoint beyond it, and the judge prompts are chosen
with a generator seeded by (seed, step), so a resume continues exactly.

The labels are the scores the step already has: the verifier's component of the reward (a
weight of 0 keeps it out of the total) or of monitor.gold, as for a reward model that learns
online (training/rl/online_rm.py). The policy's text is read as ordinary text in the judge
prompt (prompts.PlainText): a "<|im_end|>" it wrote cannot end the judge's turn and answer
for it."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from aha.algorithms import zero_variance_groups
from aha.algorithms.referee import (
    balanced_pick,
    judge_text,
    referee_agreement,
    verdict_logits,
    verdict_rewards,
    yes_share,
)
from aha.config import Config, ConfigError, RefereeConfig
from aha.config.referee import NAME
from aha.config.sections import component_name
from aha.models.compute import attention_for, attention_scores, autocast, on_device, plain_head, positions_from_mask
from aha.prompts import PlainText, PromptStyle, chat_messages, encode_prompts, encode_quoting, plain_text_prompt
from aha.rewards import RewardResult
from aha.rollout import Engine
from aha.rollout.rollouts import left_pad
from aha.training.rl.batch import Batch, concat_batches, group_rows
from aha.training.rl.online_rm import verifier_scores

if TYPE_CHECKING:  # collect imports this module's users; only the type is needed here
    from aha.training.rl.collect import RoundStats

log = logging.getLogger(__name__)
STAND_IN = "\ue000aha-answer\ue000"  # private-use characters: where the answer goes in the rendered template


def verdict_tokens(tokenizer, verdicts: list[str]) -> tuple[list[int], list[int]]:
    """The tokens each verdict may start with, in lower, Capitalised and UPPER case (a sampled
    verdict is read whatever its case; SmolLM2 answers "Yes", not "yes"); a ValueError when a
    token starts both (their probabilities could not be told apart)."""
    sides = [sorted({tokenizer.encode(form, add_special_tokens=False)[0]
                     for form in (v.lower(), v.capitalize(), v.upper())}) for v in verdicts]
    if set(sides[0]) & set(sides[1]):
        raise ValueError(f"referee.verdicts: {verdicts} start with the same token in the model's tokenizer, so the "
                         "referee's P(yes) cannot be read; choose verdicts that start differently")
    return sides[0], sides[1]


@dataclass
class Referee:
    """The policy as referee: its modules, how it is asked, and where its labels come from."""

    cfg: RefereeConfig
    model: torch.nn.Module  # the learner's policy
    engine: Engine
    style: PromptStyle  # the task's system prompt; no few-shot turns (they answer questions, not judge them)
    plain: PlainText
    verdict_ids: tuple[list[int], list[int]]  # the first tokens of yes (in its cases), then of no
    from_gold: bool  # the verifier is a component of monitor.gold, not of reward
    group_size: int
    micro_batch: int
    dtype: torch.dtype
    seed: int
    temperature: float  # the engine's, for a batch whose other rows carry their own (rollout.temperatures)

    def encode(self, sample: dict, completion: str) -> list[int]:
        """The judge prompt's token ids for one completion of `sample`."""
        question = sample.get("prompt")
        if not isinstance(question, str):
            raise ValueError(f"referee: sample {sample.get('id', '?')!r} has a {type(question).__name__} prompt; the "
                             "referee's template takes a string question (a chat prompt is not supported)")
        tokenizer = self.engine.tokenizer
        if self.plain.control.search(completion) is None:  # nearly always: exactly as a task prompt is encoded
            judged = {"id": sample.get("id"), "prompt": judge_text(self.cfg.template, question, completion)}
            return encode_prompts(tokenizer, self.style, [judged])[0]
        messages = chat_messages(self.style, {"prompt": judge_text(self.cfg.template, question, STAND_IN)})
        rendered = (tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
                    if getattr(tokenizer, "chat_template", None) is not None else plain_text_prompt(messages))
        if rendered.count(STAND_IN) != 1:  # the template edits the user's text: no place to put the answer
            raise ValueError("referee: the chat template does not write the user's message as given; it cannot quote "
                             "an answer that holds a control token's text")
        before, _, after = rendered.partition(STAND_IN)
        return encode_quoting(tokenizer, self.plain, before, completion, after)

    @torch.no_grad()
    def scores(self, texts: list[str], samples: list[dict]) -> torch.Tensor:
        """(N,) P(yes) / (P(yes) + P(no)) of each completion, from the next-token distribution
        at the start of the referee's reply (one forward pass, micro-batches of train's size)."""
        prompts = [self.encode(s, t) for t, s in zip(texts, samples)]
        backbone, head = self.model.base_model, self.model.get_output_embeddings()
        was_training, out = self.model.training, []
        self.model.eval()
        for start in range(0, len(prompts), self.micro_batch):
            ids, mask = on_device(backbone.device, *left_pad(prompts[start:start + self.micro_batch],
                                                             self.engine.pad_id))
            with attention_for(backbone, attention_scores(backbone.config, *ids.shape, ids.shape[1])), \
                    autocast(self.dtype, backbone.device):
                hidden = backbone(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask),
                                  use_cache=False).last_hidden_state[:, -1]
            rows = self.verdict_ids[0] + self.verdict_ids[1]  # the head's rows of the verdicts' first tokens
            if plain_head(self.model) is not None:  # those rows of the head only, in fp32
                bias = None if head.bias is None else head.bias[rows].float()
                logits = F.linear(hidden.float(), head.weight[rows].float(), bias)
            else:
                logits = head(hidden).float()[:, rows]
            yes = len(self.verdict_ids[0])
            logits = verdict_logits(logits, list(range(yes)), list(range(yes, len(rows))))
            out.append(yes_share(logits).cpu())
        self.model.train(was_training)
        return torch.cat(out) if out else torch.zeros(0)

    def judge(self, result: RewardResult, texts: list[str], samples: list[dict]) -> RewardResult:
        """The reward's result with the referee's scores added: a component named referee, and
        weight times it in the total."""
        scores = self.scores(texts, samples)
        return replace(result, total=result.total + self.cfg.weight * scores,
                       components={**result.components, NAME: scores})

    def groups(self, step: int, seen: RoundStats, gold: RewardResult | None) -> tuple[Batch | None, dict]:
        """The referee's agreement with the verifier on the step's completions, and its
        training groups: verdicts sampled on a balanced choice of them, the groups whose
        verdicts differ (None when none does)."""
        labels = verifier_scores(self.cfg.verifier, self.from_gold, seen, gold)
        if labels is None or NAME not in seen.components:
            log.warning("step %d: no score of the verifier %s for some samples (all failed in a round, or parts of a "
                        "dict); the referee does not train this step", step, self.cfg.verifier)
            return None, {"referee/groups": 0}
        scores, right = torch.cat(seen.components[NAME]), labels >= self.cfg.threshold
        usable = torch.ones(len(right), dtype=torch.bool)
        agreement, _ = referee_agreement(scores, right, usable)
        stats = {"referee/agreement": agreement, "referee/score_mean": float(scores.mean()),
                 "referee/right_frac": float(right.float().mean())}
        for name, side in (("right", right), ("wrong", ~right)):
            if side.any():  # the referee's mean score on the answers the verifier marks right, and wrong
                stats[f"referee/score_{name}"] = float(scores[side].mean())
        keys = torch.rand(len(right), generator=torch.Generator().manual_seed(self.seed * 1_000_003 + step))
        picked = balanced_pick(right, usable, self.cfg.prompts_per_step, keys)
        stats["referee/judged"] = len(picked)
        if not picked:
            stats["referee/groups"] = 0
            return None, stats
        G = self.group_size
        prompts = [self.encode(seen.samples[i], seen.texts[i]) for i in picked]
        rollouts = self.engine.generate(prompts, G, max_new_tokens=self.cfg.max_new_tokens)
        rewards = verdict_rewards(rollouts.texts, right[picked].repeat_interleave(G), self.cfg.verdicts)
        keep = (~zero_variance_groups(rewards.view(-1, G))).nonzero().view(-1)
        stats.update({"referee/verdict_accuracy": float(rewards.mean()), "referee/groups": len(keep)})
        if not len(keep):
            return None, stats
        return Batch(rollouts, rewards).select(group_rows(keep, G)), stats

    def join(self, batch: Batch | None, judged: Batch | None, pad_id: int) -> Batch | None:
        """The step's batch with the referee's groups after its own (either may be None)."""
        if judged is not None:  # a verdict is whole once its first word is read: mask_truncated must not drop it
            judged = replace(judged, rollouts=replace(judged.rollouts,
                                                      truncated=torch.zeros(len(judged), dtype=torch.bool)))
        if judged is None or batch is None:
            return batch if judged is None else judged
        if batch.step_rewards is not None:  # a verdict is paid at its last token only
            judged = replace(judged, step_rewards=torch.zeros(judged.rollouts.completion_mask.shape))
        if batch.rollouts.temperature is not None:  # the answers' groups mix temperatures; verdicts are at one
            temps = torch.full((len(judged),), self.temperature)
            judged = replace(judged, rollouts=replace(judged.rollouts, temperature=temps))
        return concat_batches([batch, judged], pad_id)


def build_referee(config: Config, model: torch.nn.Module, engine: Engine, task, dtype: torch.dtype
                  ) -> Referee | None:
    """The referee of config.referee over the policy `model`, or None while it is off. A
    ConfigError when its verdicts start alike or a training sample has no string question."""
    cfg = config.referee
    if cfg.verifier is None:
        return None
    try:
        verdict_ids = verdict_tokens(engine.tokenizer, cfg.verdicts)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if isinstance(task.train, list):  # a streamed task is checked as its samples are judged
        bad = next((s for s in task.train if not isinstance(s.get("prompt"), str)), None)
        if bad is not None:
            raise ConfigError(f"referee.verifier: training sample {bad.get('id', '?')!r} has a "
                              f"{type(bad.get('prompt')).__name__} prompt; the referee's template takes a string "
                              "question (chat prompts are not supported)")
    from_gold = all(component_name(spec) != cfg.verifier for spec in config.reward)
    return Referee(cfg, model, engine, PromptStyle(system_prompt=task.system_prompt), PlainText(engine.tokenizer),
                   verdict_ids, from_gold, config.rollout.group_size, max(1, config.train.micro_batch_size), dtype,
                   config.seed, config.rollout.temperature)

