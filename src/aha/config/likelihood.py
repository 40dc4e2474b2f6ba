"""The `likelihood_reward` section (VeriFree: the policy's probability of the reference answer
after its own reasoning, read from the learner's forward pass) and its cross-checks."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from aha.config.live_reward import live_reward_problems
from aha.config.sections import Strict

NAME = "likelihood"  # the reward component its scores go by (reward/likelihood)


class LikelihoodRewardConfig(Strict):
    """VeriFree (method: rl): every completion also earns weight * the live policy's likelihood of
    the sample's reference answer put in place of the completion's own answer (a reward component
    named likelihood), from one forward pass of the policy without gradient. Off at weight 0."""

    weight: float = Field(0.0, description="the likelihood's share of the reward total, added after reward's sums, "
                                           "products and gates; 0 turns it off")
    aggregate: Literal["prob", "sum", "mean"] = Field("prob", description="prob: the probability of the answer's "
                                                      "tokens, in [0, 1] (VeriFree's); sum / mean: their summed / "
                                                      "mean log-probability (<= 0)")
    cut: Literal["answer", "end"] = Field("answer", description="answer: the reference replaces the completion's "
                                          "final answer (after its last \\boxed{, <answer>, 'The answer is', else at "
                                          "its last number) and what follows; end: it follows the whole completion")
    no_answer: str = Field("\nThe answer is ", description="what goes between the reasoning and the reference when "
                                                           "the completion states no answer (and always with cut=end)")
    score_no_answer: bool = Field(False, description="score no_answer's tokens with the reference: the policy's "
                                  "probability of going on to state the reference in that form (false: no_answer is "
                                  "read as context only, as VeriFree's answer tag is)")
    reference_field: str = Field("answer", description="the sample's field that holds the reference answer")


def likelihood_problems(config) -> list[str]:
    """Every rule of the likelihood_reward section the config breaks (none while it is off)."""
    cfg = config.likelihood_reward
    if cfg.weight == 0:
        return []
    problems = []
    if config.method != "rl":
        problems.append(f"likelihood_reward.weight pays RL samples by the policy's likelihood: method=rl only (method "
                        f"is {config.method})")
    problems += live_reward_problems(config, "likelihood_reward.weight", "the likelihood", NAME)
    return problems
