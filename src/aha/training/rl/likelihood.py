"""VeriFree's reward in the RL loop (Zhou et al. 2025, arXiv 2505.21493): each completion earns
the live policy's likelihood of the reference answer put in place of its own answer.

`likelihood_reward: {weight: 1.0}`: after the step's completions are sampled and scored
(score_round), each row's prompt and reasoning (rewards/likelihood.split_reasoning: the
completion up to where its final answer starts) are followed by the sample's reference answer,
and one forward pass of the policy, without gradient, at temperature 1, gives the log-probs of
the reference's tokens; their aggregate (algorithms/likelihood: prob, sum or mean) times
weight joins the reward total, as a component named likelihood. It is on-policy: the weights
that read it are the ones that sampled (partial rollouts and staleness are refused).

Token in, token out where it can be: the prompt's ids are the rollout's, and the reasoning's
are the sampled ids up to the longest prefix whose text is a prefix of the reasoning (only the
characters after it, at most the start of the cut token, are encoded anew, as ordinary text).

Not here: VeriFree's second gradient term, the reference answer's own log-likelihood gradient
weighted by the reward (a supervised term on y*); only the reward trains, through the policy
loss on the sampled tokens."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from aha.algorithms.likelihood import answer_likelihood
from aha.config import Config, ConfigError, LikelihoodRewardConfig
from aha.config.likelihood import NAME
from aha.models.compute import autocast
from aha.models.reward_model import right_pad
from aha.prompts import PlainText
from aha.rewards import RewardResult
from aha.rewards.likelihood import split_reasoning
from aha.rollout import Rollouts
from aha.rollout.rollouts import left_pad
from aha.training.logprobs import completion_logprobs


def reasoning_ids(tokenizer, plain: PlainText, ids: list[int], reasoning: str) -> list[int]:
    """The sampled ids up to the longest prefix whose text is a prefix of `reasoning` (binary
    search: a prefix of a prefix is a prefix), then the rest of `reasoning` encoded as text."""
    low, high = 0, len(ids)  # decode(ids[:low]) is a prefix of reasoning; find the largest such low
    while low < high:
        mid = (low + high + 1) // 2
        if reasoning.startswith(tokenizer.decode(ids[:mid], skip_special_tokens=False)):
            low = mid
        else:
            high = mid - 1
    rest = reasoning[len(tokenizer.decode(ids[:low], skip_special_tokens=False)):]
    return ids[:low] + (plain(rest)["input_ids"] if rest else [])


@dataclass
class LikelihoodReward:
    """The policy's likelihood of reference answers, as a reward component."""

    cfg: LikelihoodRewardConfig
    model: torch.nn.Module  # the learner's policy
    tokenizer: object
    plain: PlainText
    pad_id: int
    micro_batch: int
    dtype: torch.dtype

    def reference(self, sample: dict) -> str:
        answer = sample.get(self.cfg.reference_field)
        if answer is None or str(answer) == "":
            raise ValueError(f"likelihood_reward.reference_field: sample {sample.get('id', '?')!r} has no "
                             f"{self.cfg.reference_field!r} to score")
        return str(answer)

    def sequences(self, rollouts: Rollouts, samples: list[dict]) -> tuple[list[list[int]], list[list[int]]]:
        """Each row's context (prompt and reasoning ids) and answer ids (the gap before the
        answer and the reference answer)."""
        contexts, answers = [], []
        for row, sample in enumerate(samples):
            reasoning, gap = split_reasoning(rollouts.texts[row], self.cfg.cut, self.cfg.no_answer,
                                             self.cfg.score_no_answer)
            prompt = rollouts.prompt_ids[row][rollouts.prompt_mask[row].bool()].tolist()
            completion = rollouts.completion_ids[row][rollouts.completion_mask[row].bool()].tolist()
            contexts.append(prompt + reasoning_ids(self.tokenizer, self.plain, completion, reasoning))
            answers.append(self.tokenizer.encode(gap + self.reference(sample), add_special_tokens=False))
        return contexts, answers

    @torch.no_grad()
    def scores(self, rollouts: Rollouts, samples: list[dict]) -> torch.Tensor:
        """(N,) each row's likelihood of its reference answer (likelihood_reward.aggregate)."""
        contexts, answers = self.sequences(rollouts, samples)
        was_training, out = self.model.training, []
        self.model.eval()
        for start in range(0, len(contexts), self.micro_batch):
            rows = slice(start, start + self.micro_batch)
            context, context_mask = left_pad(contexts[rows], self.pad_id)
            answer, answer_mask = right_pad(answers[rows], self.pad_id)  # the answer follows its context
            with autocast(self.dtype, self.model.device):  # the log-probs come back on the CPU
                logprobs = completion_logprobs(self.model, context, context_mask, answer, answer_mask)
            out.append(answer_likelihood(logprobs, answer_mask, self.cfg.aggregate))
        self.model.train(was_training)
        return torch.cat(out) if out else torch.zeros(0)

    def add(self, result: RewardResult, rollouts: Rollouts, samples: list[dict]) -> RewardResult:
        """The reward's result with the likelihood added: a component named likelihood, and
        weight times it in the total."""
        scores = self.scores(rollouts, samples)
        return replace(result, total=result.total + self.cfg.weight * scores,
                       components={**result.components, NAME: scores})


def build_likelihood_reward(config: Config, model: torch.nn.Module, tokenizer, pad_id: int, task,
                            dtype: torch.dtype) -> LikelihoodReward | None:
    """The likelihood reward of config.likelihood_reward over the policy `model`, or None while
    it is off. A ConfigError when a training sample has no reference answer."""
    cfg = config.likelihood_reward
    if cfg.weight == 0:
        return None
    if isinstance(task.train, list):  # a streamed task is checked as its samples are scored
        bad = next((s for s in task.train if s.get(cfg.reference_field) in (None, "")), None)
        if bad is not None:
            raise ConfigError(f"likelihood_reward.reference_field: training sample {bad.get('id', '?')!r} has no "
                              f"{cfg.reference_field!r}: the likelihood reward scores the reference answer")
    return LikelihoodReward(cfg, model, tokenizer, PlainText(tokenizer), pad_id, max(1, config.train.micro_batch_size),
                            dtype)
