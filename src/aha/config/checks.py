"""The config's cross-checks: rules between keys of different sections, caught when the config
is read rather than at the first step, after minutes of loading and evaluation.

Each rule is (when, problem): `when(config)` is true for a config that breaks it, and the
problem names the keys, with {c.section.key} filled from the config. They are reported
together, in this order. Rules of one shape come from small tables (a key that works with
method=rl only; two keys that exclude each other)."""

from __future__ import annotations

import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aha.config.online_rm import online_problems
from aha.config.sections import BUILT_IN_TASKS


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


# the built-in tasks with a difficulty (tasks/procedural.py): all but arithmetic, a range of operands
PROCEDURAL = tuple(name for name in BUILT_IN_TASKS if name != "arithmetic")
CURRICULUM_RULES = [
    Rule(lambda c: c.curriculum.weighting == "target" and c.curriculum.target_p is None,
         "curriculum.weighting=target needs curriculum.target_p, the pass rate to draw toward (e.g. 0.5)"),
    Rule(lambda c: c.curriculum.target_p is not None and c.curriculum.weighting != "target",
         "curriculum.target_p is read by curriculum.weighting=target only (weighting is {c.curriculum.weighting})"),
    Rule(lambda c: c.curriculum.filter_after > 1 and not c.curriculum.filter,
         "curriculum.filter_after counts the groups before curriculum.filter sets a prompt aside: set "
         "curriculum.filter=true"),
    rl_only("curriculum.difficulty_max", "raises the task's difficulty from RL groups' accuracy"),
    Rule(lambda c: c.curriculum.difficulty_max is not None and (c.task.data is not None
                                                               or c.task.name not in PROCEDURAL),
         "curriculum.difficulty_max schedules task.difficulty, which only the procedural tasks have (task.name: "
         f"{', '.join(PROCEDURAL)}); task.name is {{c.task.name}}"),
    Rule(lambda c: c.curriculum.difficulty_max is not None and c.curriculum.difficulty_max <= c.task.difficulty,
         "curriculum.difficulty_max ({c.curriculum.difficulty_max}) must be above task.difficulty "
         "({c.task.difficulty}), the level the schedule starts at"),
]

INTERVENTIONS = ("rollout.temperatures", "rollout.force_continue")
LENGTH_RULES = ("algorithm.overlong_buffer", "algorithm.length_coef", "algorithm.length_adaptive")
DRIFTING = ("rollout.max_staleness", "rollout.partial_rollouts")  # train on tokens an older policy drew


def laser_d(c) -> bool:
    return c.algorithm.length_shaping == "laser_d"


# the length rules that read a prompt's group (LASER-D's buckets, A-DLP's coefficient per prompt)
LENGTH_SHAPING_RULES = [
    Rule(lambda c: laser_d(c) and c.method != "rl",
         "algorithm.length_shaping=laser_d shapes the rewards of RL groups: method=rl only"),
    Rule(lambda c: laser_d(c) and c.rollout.group_size < 2,
         "algorithm.length_shaping=laser_d reads a prompt's difficulty from its group's pass rate: "
         "rollout.group_size must be >= 2"),
    Rule(lambda c: laser_d(c) and c.algorithm.advantage == "remax",
         "algorithm.length_shaping=laser_d does not work with advantage=remax: the greedy baseline has no group to "
         "tell its difficulty"),
    *[Rule(lambda c, key=key: laser_d(c) and bool(setting(c, key)),
           f"algorithm.length_shaping=laser_d is not supported with {key}: set one of them")
      for key in ("env.name", "rollout.force_continue")],
    Rule(lambda c: c.algorithm.length_adaptive_per == "prompt" and not c.algorithm.length_adaptive,
         "algorithm.length_adaptive_per=prompt adapts A-DLP's coefficient per prompt: set "
         "algorithm.length_adaptive=true"),
]

# aha eval --search (eval/search.py)
SEARCH_RULES = [
    Rule(lambda c: c.eval.search != "none" and c.eval.search_scorer is None,
         "eval.search={c.eval.search} needs eval.search_scorer, the judge of its candidates: a process reward model "
         "({{model: runs/prm}}) or a verifier ({{fn: numeric_answer}})"),
    Rule(lambda c: c.eval.search == "greedy_step" and c.eval.search_width not in (None, 1),
         "eval.search_width ({c.eval.search_width}) is for eval.search=beam: greedy_step keeps one partial solution"),
    Rule(lambda c: c.eval.search != "none" and c.env.name is not None,
         "eval.search searches single answers, not multi-turn episodes (env.name): unset one of them"),
]


def expo(c) -> bool:
    return c.algorithm.guidance == "expo"


def bad_hint(hint: str) -> bool:
    """A hint template that does not show the answer (an escaped {{answer}} does not), or names a
    field other than prompt and answer, or does not parse."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(hint) if name is not None]
    except ValueError:
        return True
    return "answer" not in fields or any(name not in ("prompt", "answer") for name in fields)


GUIDANCE_RULES = [
    Rule(lambda c: expo(c) and c.method != "rl",
         "algorithm.guidance=expo adds answer-shown retries to RL groups: method=rl only"),
    Rule(lambda c: expo(c) and c.rollout.group_size < 2,
         "algorithm.guidance=expo replaces one wrong completion of a group: rollout.group_size must be >= 2"),
    Rule(lambda c: expo(c) and bad_hint(c.algorithm.guidance_hint),
         "algorithm.guidance_hint must show the answer with {{answer}} and name no field but {{prompt}} and "
         "{{answer}}: got {c.algorithm.guidance_hint!r}"),
    *[Rule(lambda c, key=key: expo(c) and bool(setting(c, key)),
           f"algorithm.guidance=expo does not work with {key} yet: set one of them")
      for key in ("env.name", *DRIFTING, *INTERVENTIONS)],
]


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
    Rule(lambda c: c.algorithm.tis_cap is None and (c.algorithm.is_level != "token" or c.algorithm.is_mode != "truncate"
                                                    or bool(c.algorithm.is_low)),
         "algorithm.is_level / is_mode / is_low shape the importance weights of algorithm.tis_cap: set tis_cap (the "
         "band's upper end) and old_logprobs=trainer"),
    Rule(lambda c: c.algorithm.tis_cap is not None and c.algorithm.is_low >= c.algorithm.tis_cap,
         "algorithm.is_low ({c.algorithm.is_low}) must be below algorithm.tis_cap ({c.algorithm.tis_cap}): they are "
         "the importance-weight band's ends"),
    Rule(lambda c: bool(c.algorithm.ref_reset_every or c.algorithm.ref_reset_kl) and c.algorithm.kl_coef == 0,
         "algorithm.ref_reset_every / ref_reset_kl need algorithm.kl_coef > 0 (there is no reference model)"),
    rl_only("algorithm.teacher", "scores the policy's own samples"),
    Rule(lambda c: not c.algorithm.task_reward and c.algorithm.teacher is None,
         "algorithm.task_reward=false trains on a teacher's term alone: set algorithm.teacher (a model folder with "
         "the policy's tokenizer), or keep the task reward"),
    Rule(lambda c: not c.algorithm.task_reward and c.algorithm.dynamic_sampling,
         "algorithm.task_reward=false: dynamic sampling would drop groups by task rewards that give no advantage; set "
         "algorithm.dynamic_sampling=false"),
    Rule(lambda c: c.algorithm.teacher is not None and bool(c.algorithm.replay),
         "algorithm.teacher does not work with algorithm.replay: a replayed group's teacher term was measured on an "
         "older policy; set one of them"),
    Rule(lambda c: bool(c.algorithm.replay) and c.algorithm.advantage == "gae",
         "algorithm.replay does not work with advantage=gae (stored advantages go stale with the critic)"),
    Rule(lambda c: c.algorithm.token_weighting == "ktae" and c.algorithm.advantage not in ("grpo", "rloo", "remax"),
         "algorithm.token_weighting=ktae needs a sequence-level advantage (grpo, rloo or remax)"),
    Rule(lambda c: c.algorithm.step_advantages and c.algorithm.advantage not in ("grpo", "rloo"),
         "algorithm.step_advantages needs advantage=grpo or rloo (reinforce_pp and gae already pay each step where it "
         "closes); got advantage={c.algorithm.advantage}"),
    Rule(lambda c: c.algorithm.step_advantages and c.algorithm.token_weighting == "ktae",
         "algorithm.step_advantages does not work with algorithm.token_weighting=ktae (its weights read one "
         "advantage a completion): set one of them"),
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
    Rule(lambda c: c.dpo.eval_fraction is not None and (not c.dpo.data or c.dpo.eval_data is not None),
         "dpo.eval_fraction holds out a share of dpo.data's rows: give it with dpo.data, and without dpo.eval_data"),
    Rule(lambda c: c.method == "dpo" and c.dpo.offset != "none" and c.dpo.loss != "dpo",
         "dpo.offset (ODPO) shifts the DPO loss's margin: it needs dpo.loss=dpo, not {c.dpo.loss}"),
    Rule(lambda c: c.method == "dpo" and c.dpo.loss in ("tdpo", "hinge", "bco_pair") and bool(c.dpo.label_smoothing),
         "dpo.label_smoothing is not part of dpo.loss={c.dpo.loss}: set it to 0"),
    Rule(lambda c: c.method == "dpo" and c.dpo.loss == "tdpo" and c.dpo.tdpo_version == 1 and c.dpo.tdpo_alpha != 0.5,
         "dpo.tdpo_alpha weighs TDPO2's KL term; dpo.tdpo_version=1 has none: drop dpo.tdpo_alpha or use version 2"),
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
    *CURRICULUM_RULES,
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
    *LENGTH_SHAPING_RULES,
    *SEARCH_RULES,
    *GUIDANCE_RULES,
]


def config_problems(config) -> list[str]:
    """Every rule the config breaks, in the order of RULES, then those of reward[i].online."""
    n = len(config.rollout.temperatures or ())
    return [rule.problem.format(c=config, n=n) for rule in RULES if rule.when(config)] + online_problems(config)
