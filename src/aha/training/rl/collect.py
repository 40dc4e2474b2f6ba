"""The first half of an RL step: sample groups of completions and score them."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import torch

from aha.algorithms import dither_rewards, length_cost, overlong_penalty, zero_variance_groups
from aha.config import AlgorithmConfig, RolloutConfig
from aha.envs import EpisodeRunner
from aha.rewards import CompositeReward
from aha.rollout import Engine, Rollouts
from aha.rollout.interventions import continuations, continue_tokens, sample_groups
from aha.tasks import PromptSampler, Task, encode_prompts
from aha.training.rl.batch import Batch, concat_batches, group_rows
from aha.training.rl.partial import PartialRollouts


def shaped_rewards(total: torch.Tensor, rollouts: Rollouts, algo: AlgorithmConfig, max_new_tokens: int,
                   length_coef: float = 0.0) -> torch.Tensor:
    """The verifier's score, then the length rules every sample of the run is judged by."""
    if length_coef:
        charged = total >= algo.length_correct_min if algo.length_penalize == "correct" else torch.ones_like(total, dtype=torch.bool)
        total = total + length_cost(rollouts.lengths(), max_new_tokens, length_coef, charged)
    if algo.truncated_reward is not None:
        # an answer that never ends is not an answer (DAPO's overlong shaping, in its
        # simplest form): this teaches the policy to stop, which also shortens steps
        total = torch.where(rollouts.truncated, torch.tensor(algo.truncated_reward), total)
    if algo.overlong_buffer:
        total = total + overlong_penalty(rollouts.lengths(), max_new_tokens, algo.overlong_buffer, algo.overlong_penalty)
    return total


def token_closing(tokenizer, ids: list[int], text: str, char_end: int) -> int:
    """The index of the first token whose decoded prefix of ids holds text[:char_end] whole:
    the token that closes a step ending there. A character split over several byte-level
    tokens is whole only at its last one (a prefix that cuts it decodes to U+FFFD)."""
    lo, hi = 0, len(ids) - 1
    while lo < hi:  # once text[:char_end] is whole in a prefix it stays whole: bisection finds the first
        mid = (lo + hi) // 2
        decoded = tokenizer.decode(ids[:mid + 1], skip_special_tokens=True)
        if len(decoded) >= char_end and decoded[char_end - 1] == text[char_end - 1]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def step_token_rewards(steps: list[list[tuple[int, float]]], rollouts: Rollouts, tokenizer) -> torch.Tensor:
    """(N, T): each step reward of RewardResult.steps on the completion token that closes its
    step (two steps closing in one token add up). A step that ends with the text (the last
    one) closes at the completion's last token, the stop token where the model stopped, as
    the process reward model scored it."""
    out = torch.zeros(rollouts.completion_ids.shape)
    for i, row in enumerate(steps):
        # the whole completion, inserted tokens ("Wait") included, as its text was decoded;
        # a step closing on an inserted token is paid at the last token with the outcome
        length = int(rollouts.sequence_mask()[i].sum())
        ids, text = rollouts.completion_ids[i, :length].tolist(), rollouts.texts[i]
        for end, value in row:
            if ids:
                out[i, length - 1 if end >= len(text) else token_closing(tokenizer, ids, text, end)] += value
    return out


def finite(values: torch.Tensor) -> torch.Tensor:
    """The finite entries: a NaN or inf reward (counted in `reward/failed` or `reward/nonfinite`)
    must not turn the step's reward statistics into NaN."""
    return values[torch.isfinite(values)]


def finite_mean(values: torch.Tensor) -> float:
    """Mean of the finite entries; 0.0 if there are none."""
    values = finite(values)
    return float(values.mean()) if len(values) else 0.0


def collect(engine: Engine, task: Task, sampler: PromptSampler, reward: CompositeReward,
            rollout: RolloutConfig, algo: AlgorithmConfig, length_coef: float = 0.0,
            first: tuple[list[dict], Rollouts] | None = None, partial: PartialRollouts | None = None,
            version: int = 0, env: EpisodeRunner | None = None
            ) -> tuple[Batch | None, dict, list[dict], tuple[list[str], list[dict]]]:
    """Sample groups; with dynamic sampling, drop groups whose rewards are all equal (zero
    advantage, no gradient) and sample more prompts, up to algo.max_rounds rounds, until
    prompts_per_step informative groups are found (DAPO, Yu et al. 2025).

    Returns the kept batch (None if no group was kept), statistics over everything sampled,
    a few example records for samples.jsonl, and every sampled (text, sample) pair for the
    hacking monitor. first: the first round's prompts and rollouts, sampled ahead
    (asynchronous RL); later rounds sample here. partial: the groups carried between rounds
    (partial rollouts), each round sampling until prompts_per_step groups are complete on
    policy `version`. env: multi-turn episodes instead of single completions, the
    environment's rewards instead of the reward's (each turn's on its last token)."""
    G = rollout.group_size
    kept: list[Batch] = []
    raw, shaped, lengths, truncated, components, failed = [], [], [], [], {}, 0  # over every round sampled
    failures: Counter = Counter()
    row_temperatures, continued = [], []  # each row's temperature (or None), its forced continuations
    zero_var = groups_seen = kept_groups = 0
    examples: list[dict] = []
    texts: list[str] = []
    text_samples: list[dict] = []
    for _ in range(algo.max_rounds if algo.dynamic_sampling else 1):
        prompts_needed = rollout.prompts_per_step - kept_groups
        episodes = None
        if first is not None:
            (chosen, rollouts), first = first, None
            prompts = encode_prompts(engine.tokenizer, task, chosen)
        elif partial is not None:
            chosen, rollouts = partial.round(engine, task, sampler, rollout.prompts_per_step, version)
            prompts = encode_prompts(engine.tokenizer, task, chosen)
        else:
            chosen = sampler.next(rollout.prompts_per_step)
            prompts = encode_prompts(engine.tokenizer, task, chosen)
            episodes = env.play(engine, task, chosen, G) if env is not None else None
            rollouts = episodes.rollouts if episodes is not None else sample_groups(
                engine, prompts, G, rollout.temperatures, rollout.force_continue, rollout.continue_text)
        seq_samples = [chosen[i] for i in rollouts.prompt_index.tolist()]
        result = episodes.result if episodes is not None else reward.score(rollouts.texts, seq_samples)
        texts += rollouts.texts
        text_samples += seq_samples
        rewards = shaped_rewards(result.total, rollouts, algo, rollout.max_new_tokens, length_coef)
        step_rewards = None
        if episodes is not None:  # each turn's reward where the turn ends
            step_rewards = episodes.turn_rewards.clone()
        elif result.steps is not None:  # a process reward model's dense form
            step_rewards = step_token_rewards(result.steps, rollouts, engine.tokenizer)
        if step_rewards is not None:
            if algo.truncated_reward is not None:  # a cut answer gets truncated_reward, and nothing per step
                step_rewards[rollouts.truncated] = 0.0
        # each group's right answers, for a curriculum that learns which prompts pay (tasks/curriculum.py)
        right = (result.total >= algo.length_correct_min).view(-1, G).sum(dim=1).tolist()
        sampler.observe(chosen, right, G, version + 1)
        raw.append(result.total)
        row_temperatures.append(rollouts.temperature)
        if rollout.force_continue:
            continued.append(continuations(rollouts, len(continue_tokens(engine.tokenizer, rollout.continue_text))))
        shaped.append(rewards)
        lengths.append(rollouts.lengths())
        truncated.append(rollouts.truncated.float())
        failed += int(result.failed.sum())
        failures.update(result.failures)
        for name, values in result.components.items():
            components.setdefault(name, []).append(values)
        if not examples:
            examples = [{"prompt": seq_samples[i]["prompt"], "answer": seq_samples[i].get("answer"),
                         "completion": rollouts.texts[i], "reward": float(rewards[i]),
                         **{k: float(v[i]) for k, v in result.components.items()},
                         **(episodes.episodes[i].record() if episodes is not None else {}),
                         **_interventions(rollouts, i, continued[-1] if continued else None)}
                        for i in range(0, len(rollouts), max(1, G))]
        if algo.reward_noise:
            rewards = dither_rewards(rewards, algo.reward_noise, algo.reward_noise_kind)
        baseline = None
        if algo.advantage == "remax":
            if env is not None:
                played = env.play(engine, task, chosen, greedy=True)
                greedy, greedy_score = played.rollouts, played.result.total
            else:
                greedy = engine.generate(prompts, greedy=True)
                greedy_score = reward.score(greedy.texts, chosen).total
            baseline = shaped_rewards(greedy_score, greedy, algo, rollout.max_new_tokens, length_coef).repeat_interleave(G)
        grouped = rewards.view(-1, G)
        informative = ~zero_variance_groups(grouped)
        if baseline is not None:  # ReMax: a flat group still learns if it differs from greedy
            informative |= (grouped != baseline.view(-1, G)).any(dim=1)
        if step_rewards is not None and algo.advantage in ("reinforce_pp", "gae"):
            # equal totals paid at different tokens still differ token by token
            steps = step_rewards.view(-1, G, step_rewards.shape[1])
            informative |= (steps != steps[:, :1]).any(dim=2).any(dim=1)
        groups_seen += grouped.shape[0]
        zero_var += int(zero_variance_groups(shaped[-1].view(-1, G)).sum())
        keep = informative if algo.dynamic_sampling else torch.ones_like(informative)
        keep_groups = keep.nonzero().view(-1)[:prompts_needed]
        if len(keep_groups):
            rows = group_rows(keep_groups, G)
            kept.append(Batch(rollouts, rewards, baseline, step_rewards).select(rows))
            kept_groups += len(keep_groups)
        if kept_groups >= rollout.prompts_per_step:
            break
    all_shaped = finite(torch.cat(shaped))
    stats = {
        "reward/mean": finite_mean(all_shaped),
        "reward/std": float(all_shaped.std()) if len(all_shaped) > 1 else 0.0,
        "reward/verifier_mean": finite_mean(torch.cat(raw)),
        "reward/correct_frac": float((torch.cat(raw) >= algo.length_correct_min).float().mean()),
        **{f"reward/{k}": finite_mean(torch.cat(v)) for k, v in components.items()},
        "reward/failed": failed,
        "reward/failed_frac": failed / max(sum(len(r) for r in raw), 1),
        **{f"reward_failed/{k}": v for k, v in failures.items()},
        "length/mean": float(torch.cat(lengths).mean()),
        "length/truncated_frac": float(torch.cat(truncated).mean()),
        "groups/sampled": groups_seen,
        "groups/zero_variance_frac": zero_var / max(groups_seen, 1),
        "groups/trained": kept_groups,
        **_intervention_stats(rollout, torch.cat(raw), torch.cat(lengths), row_temperatures, continued),
        **(partial.last_stats if partial is not None else {}),  # of the step's last round
        **sampler.stats(),
    }
    if any(b.step_rewards is not None for b in kept):  # a round whose reward gave no step: none there, not none at all
        kept = [b if b.step_rewards is not None else replace(b, step_rewards=torch.zeros(b.rollouts.completion_mask.shape))
                for b in kept]
    batch = concat_batches(kept, engine.pad_id) if kept else None
    return batch, stats, examples, (texts, text_samples)


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
