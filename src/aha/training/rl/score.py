"""Scoring a round for the RL step: the verifier's scores shaped by the run's length rules, a
process reward's steps placed on the tokens that close them, and statistics that ignore the
NaN of a failed sample."""

from __future__ import annotations

import torch

from aha.algorithms import laser_bonus, length_cost, outcome_token_rewards, overlong_penalty
from aha.config import AlgorithmConfig
from aha.rollout import Rollouts


def shaped_rewards(total: torch.Tensor, rollouts: Rollouts, algo: AlgorithmConfig, max_new_tokens: int,
                   length_coef: float | torch.Tensor = 0.0, targets: torch.Tensor | None = None) -> torch.Tensor:
    """The verifier's score, then the length rules every sample of the run is judged by.
    length_coef: the run's, or each row's own (A-DLP per prompt); targets: each row's LASER-D
    target length (None: no LASER-D bonus)."""
    correct = total >= algo.length_correct_min  # judged on the verifier's score, before any shaping
    if isinstance(length_coef, torch.Tensor) or length_coef:
        charged = correct if algo.length_penalize == "correct" else torch.ones_like(correct)
        total = total + length_cost(rollouts.lengths(), max_new_tokens, length_coef, charged)
    if targets is not None:
        total = total + laser_bonus(correct, rollouts.lengths(), targets, algo.laser_bonus)
    if algo.truncated_reward is not None:
        # an answer that never ends is not an answer (DAPO's overlong shaping, in its
        # simplest form): this teaches the policy to stop, which also shortens steps
        total = torch.where(rollouts.truncated, torch.tensor(algo.truncated_reward), total)
    if algo.overlong_buffer:
        total = total + overlong_penalty(rollouts.lengths(), max_new_tokens, algo.overlong_buffer,
                                         algo.overlong_penalty)
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


def step_tokens(steps: list[list[tuple[int, float]]], rollouts: Rollouts,
                tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, T) each step reward of RewardResult.steps on the completion token that closes its
    step (two steps closing in one token add up), and (N, T) 1.0 at each such token: a step
    can be worth exactly 0 (a clipped good step), and a step-level group baseline still counts
    it. A step that ends with the text (the last one) closes at the completion's last token,
    the stop token where the model stopped, as the process reward model scored it."""
    out, ends = torch.zeros(rollouts.completion_ids.shape), torch.zeros(rollouts.completion_ids.shape)
    for i, row in enumerate(steps):
        # the whole completion, inserted tokens ("Wait") included, as its text was decoded;
        # a step closing on an inserted token is paid at the last token with the outcome
        length = int(rollouts.sequence_mask()[i].sum())
        ids, text = rollouts.completion_ids[i, :length].tolist(), rollouts.texts[i]
        for end, value in row:
            if ids:
                t = length - 1 if end >= len(text) else token_closing(tokenizer, ids, text, end)
                out[i, t] += value
                ends[i, t] = 1.0
    return out, ends


def finite(values: torch.Tensor) -> torch.Tensor:
    """The finite entries: a NaN or inf reward (counted in `reward/failed` or `reward/nonfinite`)
    must not turn the step's reward statistics into NaN."""
    return values[torch.isfinite(values)]


def finite_mean(values: torch.Tensor) -> float:
    """Mean of the finite entries; 0.0 if there are none."""
    values = finite(values)
    return float(values.mean()) if len(values) else 0.0


def turn_ends(episodes) -> torch.Tensor:
    """(N, T) 1.0 at the last policy token of each turn of each episode, where its reward is paid."""
    ends = torch.zeros(episodes.turn_rewards.shape)
    for i, episode in enumerate(episodes.episodes):
        for end in episode.turn_ends:
            if end >= 0:  # a turn with no token at all has nowhere to be paid
                ends[i, end] = 1.0
    return ends


def task_stats(seen, algo) -> dict:
    """A task mixture's step statistics per task (each sample's `task`), over every round the
    step sampled: reward/<task>/mean (shaped), reward/<task>/verifier_mean (unshaped) and
    reward/<task>/correct_frac. Nothing for a single task (its samples have no `task`)."""
    tasks = [sample.get("task") for sample in seen.samples]
    if not any(t is not None for t in tasks):
        return {}
    shaped, raw, stats = torch.cat(seen.shaped), torch.cat(seen.raw), {}
    for task in dict.fromkeys(t for t in tasks if t is not None):
        rows = torch.tensor([t == task for t in tasks])
        stats[f"reward/{task}/mean"] = finite_mean(shaped[rows])
        stats[f"reward/{task}/verifier_mean"] = finite_mean(raw[rows])
        stats[f"reward/{task}/correct_frac"] = float((raw[rows] >= algo.length_correct_min).float().mean())
    return stats


def cut_to_one_step(step_rewards: torch.Tensor, step_ends: torch.Tensor, rollouts: Rollouts,
                    rewards: torch.Tensor) -> None:
    """In place: a completion cut at max_new_tokens (algorithm.truncated_reward) keeps none of
    its steps and is one step worth its shaped reward, at its last token. Every estimator is
    paid as before (that reward sat on that token as the outcome); a step-level group baseline
    (algorithm.step_advantages) now weighs the cut answer against the other rows' steps, as a
    sequence-level one weighs its total, rather than leaving it out: left out, a cut answer got
    no advantage at all, and the policy learned to ramble to the limit to escape below-average
    steps (runs/steps_delta, docs/methods.md)."""
    cut = rollouts.truncated
    paid = outcome_token_rewards(rewards, rollouts.completion_mask)
    ends = outcome_token_rewards(torch.ones_like(rewards), rollouts.completion_mask)
    step_rewards[cut], step_ends[cut] = paid[cut], ends[cut]


def round_steps(episodes, result, rollouts: Rollouts, rewards: torch.Tensor, truncated_reward: float | None,
                tokenizer) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(step_rewards, step_ends) of a scored round, (None, None) when its reward gave no step:
    each episode's turn rewards where the turns end, or a process reward's steps
    (RewardResult.steps) where they close; with truncated_reward a cut completion is one step
    (cut_to_one_step)."""
    if episodes is not None:
        step_rewards, step_ends = episodes.turn_rewards.clone(), turn_ends(episodes)
    elif result.steps is not None:
        step_rewards, step_ends = step_tokens(result.steps, rollouts, tokenizer)
    else:
        return None, None
    if truncated_reward is not None:
        cut_to_one_step(step_rewards, step_ends, rollouts, rewards)
    return step_rewards, step_ends

