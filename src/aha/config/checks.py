"""The config's cross-checks: rules between keys of different sections, caught when the config
is read rather than at the first step, after minutes of loading and evaluation.

Each rule is (when, problem): `when(config)` is true for a config that breaks it, and the
problem names the keys, with {c.section.key} filled from the config. They are reported
together, in this order. Rules of one shape come from small tables (a key that works with
method=rl only; two keys that exclude each other)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    when: Callable[[Any], bool]  # the config breaks the rule
    problem: str  # what to say, formatted with c=config


def setting(config, dotted: str):
    """config.rollout.max_staleness for 'rollout.max_staleness'."""
    value = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def rl_only(key: str, why: str) -> Rule:
    """A key set outside method=rl."""
    return Rule(lambda c: bool(setting(c, key)) and c.method != "rl", f"{key} {why}: method=rl only")


def excludes(key: str, other: str, problem: str) -> Rule:
    """Two keys that cannot both be set; problem is formatted with key and other."""
    return Rule(lambda c: bool(setting(c, key)) and bool(setting(c, other)), problem.format(key=key, other=other))


def curriculum_chooses(c) -> bool:
    return bool(c.curriculum.filter) or c.curriculum.weighting != "uniform"


INTERVENTIONS = ("rollout.temperatures", "rollout.force_continue")
LENGTH_RULES = ("algorithm.overlong_buffer", "algorithm.length_coef", "algorithm.length_adaptive")
DRIFTING = ("rollout.max_staleness", "rollout.partial_rollouts")  # train on tokens an older policy drew

RULES = [
    Rule(lambda c: c.algorithm.advantage == "grpo" and c.algorithm.advantage_scale == "std"
         and c.rollout.group_size < 2,
         "rollout.group_size must be >= 2 with algorithm.advantage_scale=std (a group's std needs two samples)"),
    Rule(lambda c: c.algorithm.advantage == "rloo" and c.rollout.group_size < 2,
         "rollout.group_size must be >= 2 with algorithm.advantage=rloo (the baseline is the other samples)"),
    Rule(lambda c: c.algorithm.policy_loss == "pg" and (c.algorithm.epochs > 1 or c.algorithm.mini_batches > 1),
         "algorithm.policy_loss=pg is on-policy only: use epochs=1 and mini_batches=1, or policy_loss=ppo"),
    Rule(lambda c: c.algorithm.tis_cap is not None and c.algorithm.old_logprobs != "trainer",
         "algorithm.tis_cap needs algorithm.old_logprobs=trainer (the weight is pi_trainer / pi_engine)"),
    Rule(lambda c: bool(c.algorithm.ref_reset_every or c.algorithm.ref_reset_kl) and c.algorithm.kl_coef == 0,
         "algorithm.ref_reset_every / ref_reset_kl need algorithm.kl_coef > 0 (there is no reference model)"),
    Rule(lambda c: bool(c.algorithm.replay) and c.algorithm.advantage == "gae",
         "algorithm.replay does not work with advantage=gae (stored advantages go stale with the critic)"),
    Rule(lambda c: c.algorithm.token_weighting == "ktae" and c.algorithm.advantage not in ("grpo", "rloo", "remax"),
         "algorithm.token_weighting=ktae needs a sequence-level advantage (grpo, rloo or remax)"),
    Rule(lambda c: c.algorithm.overlong_buffer > c.rollout.max_new_tokens,
         "algorithm.overlong_buffer ({c.algorithm.overlong_buffer}) exceeds rollout.max_new_tokens "
         "({c.rollout.max_new_tokens})"),
    Rule(lambda c: c.method == "dpo" and not c.dpo.data and not c.dpo.online,
         "method=dpo needs dpo.data (a JSONL file of {{prompt, chosen, rejected}}) or dpo.online=true"),
    Rule(lambda c: c.method == "dpo" and c.dpo.loss == "orpo" and bool(c.dpo.nll_coef),
         "dpo.nll_coef adds an NLL term that dpo.loss=orpo already has: set one of them"),
    Rule(lambda c: c.method == "dpo" and c.dpo.loss == "kto"
         and bool(c.dpo.online or c.dpo.nll_coef or c.dpo.label_smoothing),
         "dpo.loss=kto trains offline on labelled completions: dpo.online, dpo.nll_coef and dpo.label_smoothing "
         "are for the pair losses"),
    Rule(lambda c: c.method == "dpo" and bool(c.dpo.data) and c.dpo.online,
         "dpo.data is not used with dpo.online=true (the pairs are sampled from the policy): drop one"),
    Rule(lambda c: c.method == "rm" and not c.rm.data,
         "method=rm needs rm.data: a JSONL file of {{prompt, chosen, rejected}}"),
    Rule(lambda c: c.method == "prm" and not c.prm.data,
         "method=prm needs prm.data: a JSONL file of {{prompt, steps, labels}}"),
    Rule(lambda c: c.train.keep_best and c.method in ("rm", "prm"),
         "train.keep_best ranks checkpoints by held-out accuracy of sampled answers, which method={c.method} does "
         "not measure (it scores pairs or steps): drop it"),
    Rule(lambda c: bool(c.rollout.max_staleness) and not (c.method == "rl" and c.ray.rollout_workers),
         "rollout.max_staleness > 0 (asynchronous RL) samples ahead on Ray rollout workers: set "
         "ray.rollout_workers >= 1 (and method=rl)"),
    Rule(lambda c: curriculum_chooses(c) and c.method != "rl",
         "curriculum.filter / curriculum.weighting choose prompts from RL groups' outcomes: method=rl only"),
    rl_only("rollout.partial_rollouts", "carries completions from one RL round to the next"),
    *[Rule(lambda c, key=key: bool(setting(c, key)) and c.algorithm.old_logprobs == "trainer"
           and c.algorithm.tis_cap is None,
           f"{key} with algorithm.old_logprobs=trainer needs algorithm.tis_cap: the trainer's log-probs of the current "
           "policy would treat tokens an older one drew as on-policy") for key in DRIFTING],
    *[excludes(key, other, "{key} does not work with {other} yet: set one of them")
      for key in INTERVENTIONS for other in ("rollout.partial_rollouts", "rollout.max_staleness", "env.name")],
    *[rl_only(key, "changes how RL samples its groups") for key in INTERVENTIONS],
    Rule(lambda c: bool(c.rollout.temperatures) and len(c.rollout.temperatures) > c.rollout.group_size,
         "rollout.temperatures lists {n} temperatures for groups of rollout.group_size={c.rollout.group_size}: some "
         "would never be used"),
    *[excludes("rollout.force_continue", key, "{other} measures a completion against max_new_tokens, which "
               "rollout.force_continue lets it pass: set one of them") for key in LENGTH_RULES],
    Rule(lambda c: c.task.stream and c.task.data is None,
         "task.stream reads task.data from disk a row at a time: set task.data"),
    Rule(lambda c: c.task.stream and curriculum_chooses(c),
         "curriculum.filter / curriculum.weighting look at every prompt each step: not with task.stream (the "
         "prompts stay on disk)"),
    Rule(lambda c: c.env.name is not None and c.method != "rl",
         "env.name plays multi-turn episodes for online RL: method=rl only"),
    *[Rule(lambda c, key=key: c.env.name is not None and bool(setting(c, key)),
           f"{key} is not supported with multi-turn episodes (env.name): set it to 0")
      for key in ("rollout.partial_rollouts", "rollout.max_staleness", *LENGTH_RULES)],
    Rule(lambda c: bool(c.ray.reward_workers) and not any(spec.workers for spec in [*c.reward, *c.monitor.gold]),
         "ray.reward_workers runs reward pools on Ray: give the slow rewards workers: N (>= 1)"),
]


def config_problems(config) -> list[str]:
    """Every rule the config breaks, in the order of RULES."""
    n = len(config.rollout.temperatures or ())
    return [rule.problem.format(c=config, n=n) for rule in RULES if rule.when(config)]
