"""The first half of an RL step: draw rounds of groups, score them, keep the informative ones.

collect() reads as the method: draw a round (draw_round), score it (score_round), note what
it sampled (RoundStats), keep its informative groups (informative_groups), and with dynamic
sampling draw again until the step has its groups."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import torch

from aha.algorithms import dither_rewards, flat_step_groups, zero_variance_groups
from aha.config import AlgorithmConfig, RolloutConfig
from aha.config.mixture import task_field
from aha.envs import Episodes
from aha.rewards import RewardResult
from aha.rollout import Rollouts
from aha.rollout.interventions import continuations, continue_tokens, sample_groups
from aha.tasks import encode_prompts
from aha.training.phases import Phases
from aha.training.rl.batch import Batch, concat_batches, group_rows, with_zero_steps
from aha.training.rl.parts import StepParts
from aha.training.rl.score import finite, finite_mean, round_steps, shaped_rewards, task_stats


@dataclass
class Round:
    """One round's groups: the prompts drawn, their token ids, the rollouts (group_size rows a
    prompt) and, for multi-turn episodes, the episodes (which carry their own rewards)."""

    chosen: list[dict]
    prompts: list[list[int]]
    rollouts: Rollouts
    episodes: Episodes | None = None


@dataclass
class Scored:
    """A round's scores: each row's sample, the reward's result, the shaped reward trained on,
    and per-token rewards where the reward gives them (process rewards, episodes' turns)."""

    samples: list[dict]
    result: RewardResult
    rewards: torch.Tensor
    step_rewards: torch.Tensor | None
    step_ends: torch.Tensor | None = None  # (N, T) 1.0 where a step (or an episode's turn) closes


def draw_round(parts: StepParts, first: tuple[list[dict], Rollouts] | None, version: int) -> Round:
    """A round sampled ahead (asynchronous RL), carried and launched (partial rollouts), played
    as episodes (an environment), or sampled here."""
    engine, task, rollout = parts.engine, parts.task, parts.config.rollout
    if first is not None:
        chosen, rollouts = first
        return Round(chosen, encode_prompts(engine.tokenizer, task, chosen), rollouts)
    if parts.partial is not None:
        chosen, rollouts = parts.partial.round(engine, task, parts.sampler, rollout.prompts_per_step, version)
        return Round(chosen, encode_prompts(engine.tokenizer, task, chosen), rollouts)
    chosen = parts.sampler.next(rollout.prompts_per_step)
    prompts = encode_prompts(engine.tokenizer, task, chosen)
    if parts.env is not None:
        episodes = parts.env.play(engine, task, chosen, rollout.group_size)
        return Round(chosen, prompts, episodes.rollouts, episodes)
    return Round(chosen, prompts, sample_groups(engine, prompts, rollout.group_size, rollout.temperatures,
                                                rollout.force_continue, rollout.continue_text))


def generated(rollouts: Rollouts) -> list[int]:
    """The tokens the policy generated for each completion (its stop token too), which length
    rewards measure: text can hide length from a count of words."""
    return [int(n) for n in rollouts.lengths().tolist()]


def score_round(parts: StepParts, round_: Round, length_coef: float, result: RewardResult | None = None) -> Scored:
    """The reward's scores (an episode's own), shaped by the run's length rules. result: the
    scores when they are known (a round with guided rows: their retries' scores)."""
    algo, rollouts = parts.config.algorithm, round_.rollouts
    samples = [round_.chosen[i] for i in rollouts.prompt_index.tolist()]
    if result is None:
        result = (round_.episodes.result if round_.episodes is not None
                  else parts.reward.score(rollouts.texts, samples, generated(rollouts)))
        if parts.referee is not None:  # URPO: the live policy judges each completion too (reward/referee)
            result = parts.referee.judge(result, rollouts.texts, samples)
        result = result if parts.likelihood is None else parts.likelihood.add(result, rollouts, samples)  # VeriFree
    coef, targets = length_coef, None
    if parts.length is not None:  # A-DLP per prompt, LASER-D targets by the group's difficulty
        coef = parts.length.coef(samples, length_coef)
        targets = parts.length.row_targets(result.total >= algo.length_correct_min)
    rewards = shaped_rewards(result.total, rollouts, algo, parts.config.rollout.max_new_tokens, coef, targets)
    step_rewards, step_ends = round_steps(round_.episodes, result, rollouts, rewards, algo.truncated_reward,
                                          parts.engine.tokenizer)  # an episode's turns, a process reward's steps
    return Scored(samples, result, rewards, step_rewards, step_ends)


def remax_baseline(parts: StepParts, round_: Round, length_coef: float, phases: Phases) -> torch.Tensor:
    """ReMax: each row's baseline is its prompt's greedy completion's shaped reward."""
    engine, algo, rollout = parts.engine, parts.config.algorithm, parts.config.rollout
    with phases("generate"):
        if parts.env is not None:
            played = parts.env.play(engine, parts.task, round_.chosen, greedy=True)
            greedy, greedy_score = played.rollouts, played.result.total
        else:
            greedy = engine.generate(round_.prompts, greedy=True)
    if parts.env is None:
        with phases("score"):
            greedy_score = parts.reward.score(greedy.texts, round_.chosen, generated(greedy)).total
    coef = length_coef if parts.length is None else parts.length.coef(round_.chosen, length_coef)
    shaped = shaped_rewards(greedy_score, greedy, algo, rollout.max_new_tokens, coef)
    return shaped.repeat_interleave(rollout.group_size)


def informative_groups(rewards: torch.Tensor, baseline: torch.Tensor | None, step_rewards: torch.Tensor | None,
                       algo: AlgorithmConfig, group_size: int, step_ends: torch.Tensor | None = None) -> torch.Tensor:
    """(groups,) True where a group's advantages are not all zero: its rewards differ, or
    (ReMax) differ from the greedy baseline, or (token-level estimators) differ token by token,
    or (algorithm.step_advantages) its steps' rewards differ."""
    grouped = rewards.view(-1, group_size)
    informative = ~zero_variance_groups(grouped)
    if baseline is not None:  # ReMax: a flat group still learns if it differs from greedy
        informative |= (grouped != baseline.view(-1, group_size)).any(dim=1)
    if step_rewards is not None and algo.advantage in ("reinforce_pp", "gae"):
        # equal totals paid at different tokens still differ token by token
        steps = step_rewards.view(-1, group_size, step_rewards.shape[1])
        informative |= (steps != steps[:, :1]).any(dim=2).any(dim=1)
    if step_ends is not None and algo.step_advantages:  # steps worth different amounts
        informative |= ~flat_step_groups(step_rewards, step_ends, group_size)
    return informative


@dataclass
class RoundStats:
    """What every round of a step sampled, kept or not: the step's reward, length and group
    statistics, and every (text, sample) pair for the hacking monitor."""

    raw: list[torch.Tensor] = field(default_factory=list)  # the reward's totals
    shaped: list[torch.Tensor] = field(default_factory=list)  # after the length rules
    lengths: list[torch.Tensor] = field(default_factory=list)
    truncated: list[torch.Tensor] = field(default_factory=list)
    components: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    failed: int = 0
    failures: Counter = field(default_factory=Counter)
    temperatures: list[torch.Tensor | None] = field(default_factory=list)  # each row's (multi-temperature groups)
    continued: list[torch.Tensor] = field(default_factory=list)  # each row's forced continuations
    groups_seen: int = 0
    zero_variance: int = 0
    texts: list[str] = field(default_factory=list)
    samples: list[dict] = field(default_factory=list)

    def add(self, round_: Round, scored: Scored, continued: torch.Tensor | None, group_size: int) -> None:
        rollouts, result = round_.rollouts, scored.result
        self.texts += rollouts.texts
        self.samples += scored.samples
        self.raw.append(result.total)
        self.temperatures.append(rollouts.temperature)
        if continued is not None:
            self.continued.append(continued)
        self.shaped.append(scored.rewards)
        self.lengths.append(rollouts.lengths())
        self.truncated.append(rollouts.truncated.float())
        self.failed += int(result.failed.sum())
        self.failures.update(result.failures)
        for name, values in result.components.items():
            self.components.setdefault(name, []).append(values)
        self.groups_seen += len(scored.rewards) // group_size
        self.zero_variance += int(zero_variance_groups(scored.rewards.view(-1, group_size)).sum())

    def summary(self, rollout: RolloutConfig, algo: AlgorithmConfig, kept_groups: int) -> dict:
        all_shaped, raw, lengths = finite(torch.cat(self.shaped)), torch.cat(self.raw), torch.cat(self.lengths)
        return {
            "reward/mean": finite_mean(all_shaped),
            "reward/std": float(all_shaped.std()) if len(all_shaped) > 1 else 0.0,
            "reward/verifier_mean": finite_mean(raw),
            "reward/correct_frac": float((raw >= algo.length_correct_min).float().mean()),
            **{f"reward/{k}": finite_mean(torch.cat(v)) for k, v in self.components.items()},
            "reward/failed": self.failed,
            "reward/failed_frac": self.failed / max(sum(len(r) for r in self.raw), 1),
            **{f"reward_failed/{k}": v for k, v in self.failures.items()},
            "length/mean": float(lengths.mean()),
            "length/truncated_frac": float(torch.cat(self.truncated).mean()),
            "groups/sampled": self.groups_seen,
            "groups/zero_variance_frac": self.zero_variance / max(self.groups_seen, 1),
            "groups/trained": kept_groups,
            **_intervention_stats(rollout, raw, lengths, self.temperatures, self.continued), **task_stats(self, algo),
        }


def example_records(round_: Round, scored: Scored, continued: torch.Tensor | None, group_size: int) -> list[dict]:
    """One completion a group, with its reward breakdown, for samples.jsonl."""
    rollouts, result = round_.rollouts, scored.result
    return [{"prompt": scored.samples[i]["prompt"], "answer": scored.samples[i].get("answer"),
             "completion": rollouts.texts[i], "reward": float(scored.rewards[i]),
             **{k: float(v[i]) for k, v in result.components.items() if v[i] == v[i]},  # NaN: another task's
             **(round_.episodes.episodes[i].record() if round_.episodes is not None else {}),
             **_interventions(rollouts, i, continued), **task_field(scored.samples[i])}
            for i in range(0, len(rollouts), max(1, group_size))]


def guide(parts: StepParts, round_: Round, scored: Scored, length_coef: float, phases: Phases,
          counts: Counter) -> tuple[Round, Scored, torch.Tensor | None]:
    """ExPO (algorithm.guidance=expo): an unsolved group's answer-shown retry in place of one
    wrong row, scored and shaped like the rest (training/rl/guidance.py); which rows those are
    (None without guidance). counts gathers what guidance did over the step's rounds."""
    if parts.guidance is None:
        return round_, scored, None
    done = parts.guidance.apply(parts, round_.chosen, round_.rollouts, scored.result, phases)
    counts.update(done.counts())
    if done.found:
        round_ = replace(round_, rollouts=done.rollouts)
        scored = score_round(parts, round_, length_coef, done.result)
    return round_, scored, done.guided


def collect(parts: StepParts, phases: Phases, length_coef: float = 0.0,
            first: tuple[list[dict], Rollouts] | None = None, version: int = 0
            ) -> tuple[Batch | None, dict, list[dict], RoundStats]:
    """Sample groups; with dynamic sampling, drop groups whose rewards are all equal (zero
    advantage, no gradient) and sample more prompts, up to algo.max_rounds rounds, until
    prompts_per_step informative groups are found (DAPO, Yu et al. 2025).

    Returns the kept batch (None if no group was kept), statistics over everything sampled,
    a few example records for samples.jsonl, and what every round sampled (RoundStats: each
    (text, sample) pair for the hacking monitor, each component's scores for a reward model
    that learns). first: the first round's prompts and rollouts, sampled ahead (asynchronous
    RL); later rounds sample here. With partial rollouts each round samples
    until prompts_per_step groups are complete on policy `version`; with an environment,
    rows are episodes and their rewards the environment's (each turn's on its last token)."""
    rollout, algo, engine = parts.config.rollout, parts.config.algorithm, parts.engine
    G = rollout.group_size
    kept: list[Batch] = []
    kept_groups, examples, seen, guide_counts = 0, [], RoundStats(), Counter()
    for _ in range(algo.max_rounds if algo.dynamic_sampling else 1):
        with phases("generate"):
            round_, first = draw_round(parts, first, version), None
        with phases("score"):
            scored = score_round(parts, round_, length_coef)
        # each group's right answers, for a curriculum that learns which prompts pay (tasks/curriculum.py)
        correct = scored.result.total >= algo.length_correct_min
        right = correct.view(-1, G).sum(dim=1).tolist()
        parts.sampler.observe(round_.chosen, right, G, version + 1)
        if parts.length is not None:  # learnt from at the end of the step
            parts.length.observe(round_.chosen, correct, round_.rollouts.lengths())
        continued = (continuations(round_.rollouts, len(continue_tokens(engine.tokenizer, rollout.continue_text)))
                     if rollout.force_continue else None)
        seen.add(round_, scored, continued, G)
        examples = examples or example_records(round_, scored, continued, G)
        round_, scored, guided = guide(parts, round_, scored, length_coef, phases, guide_counts)
        rewards = scored.rewards
        if algo.reward_noise:
            rewards = dither_rewards(rewards, algo.reward_noise, algo.reward_noise_kind)
        baseline = remax_baseline(parts, round_, length_coef, phases) if algo.advantage == "remax" else None
        informative = informative_groups(rewards, baseline, scored.step_rewards, algo, G, scored.step_ends)
        keep = informative if algo.dynamic_sampling else torch.ones_like(informative)
        keep_groups = keep.nonzero().view(-1)[:rollout.prompts_per_step - kept_groups]
        if len(keep_groups):
            kept.append(Batch(round_.rollouts, rewards, baseline, scored.step_rewards, scored.step_ends,
                              guided=guided).select(group_rows(keep_groups, G)))
            kept_groups += len(keep_groups)
        if kept_groups >= rollout.prompts_per_step:
            break
    stats = {**seen.summary(rollout, algo, kept_groups),
             **(parts.partial.last_stats if parts.partial is not None else {}),  # of the step's last round
             **parts.sampler.stats(), **guide_counts}
    kept = with_zero_steps(kept)
    batch = concat_batches(kept, engine.pad_id) if kept else None
    return batch, stats, examples, seen


def _interventions(rollouts: Rollouts, row: int, continued: torch.Tensor | None) -> dict:
    """What the rollout interventions did to one example (samples.jsonl)."""
    out = {}
    if rollouts.temperature is not None:
        out["temperature"] = float(rollouts.temperature[row])
    if continued is not None:
        out["continuations"] = int(continued[row])
    return out


def _intervention_stats(rollout: RolloutConfig, raw: torch.Tensor, lengths: torch.Tensor,
                        temperatures: list[torch.Tensor | None], continued: list[torch.Tensor]) -> dict:
    """Per temperature (multi-temperature groups): the verifier's mean and the mean length;
    forced continuations: the share of completions made to go on, and how often on average."""
    stats = {}
    if rollout.temperatures and all(t is not None for t in temperatures):
        per_row = torch.cat(temperatures)
        for t in sorted(set(rollout.temperatures)):
            rows = per_row == t
            stats[f"temperature/{t:g}/verifier_mean"] = finite_mean(raw[rows])
            stats[f"temperature/{t:g}/length_mean"] = float(lengths[rows].mean()) if rows.any() else 0.0
    if rollout.force_continue:
        counts = torch.cat(continued)
        stats["rollout/continued_frac"] = float((counts > 0).float().mean())
        stats["rollout/continuations_mean"] = float(counts.mean())
    return stats
