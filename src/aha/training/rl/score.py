"""Scoring a round for the RL step: the verifier's scores shaped by the run's length rules, a
process reward's steps placed on the tokens that close them, and statistics that ignore the
NaN of a failed sample."""

from __future__ import annotations

import torch

from aha.algorithms import laser_bonus, length_cost, overlong_penalty
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
