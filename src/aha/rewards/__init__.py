"""Rewards: verifiers, format shaping, weighted composition, user functions by "module:function".

A reward function has the signature fn(completion: str, sample: dict) -> float | dict[str, float].
"""

from aha.rewards.code import SandboxError, SandboxLimits, code_tests, run_python
from aha.rewards.compose import Component, CompositeReward, RewardFailureError, RewardResult, build_reward
from aha.rewards.formats import json_format, length_limit, regex_match, think_answer_format
from aha.rewards.functions import RewardError, StepScores, batched, resolve_function
from aha.rewards.pool import WorkerPool
from aha.rewards.process_reward import transform_steps
from aha.rewards.puzzles import countdown, list_answer, yes_no
from aha.rewards.reference import bleu, chrf, rouge_l
from aha.rewards.shaping import calibration_reward, length_penalty, stated_confidence, target_length_bonus
from aha.rewards.verifiers import (
    exact_match,
    extract_answer,
    format_reward,
    math_answer,
    multiple_choice,
    numeric_answer,
)

__all__ = [
    "Component",
    "CompositeReward",
    "batched",
    "WorkerPool",
    "code_tests",
    "run_python",
    "SandboxError",
    "SandboxLimits",
    "RewardError",
    "RewardFailureError",
    "RewardResult",
    "StepScores",
    "transform_steps",
    "build_reward",
    "resolve_function",
    "extract_answer",
    "format_reward",
    "numeric_answer",
    "countdown",
    "yes_no",
    "list_answer",
    "math_answer",
    "multiple_choice",
    "exact_match",
    "regex_match",
    "think_answer_format",
    "json_format",
    "length_limit",
    "bleu",
    "chrf",
    "rouge_l",
    "length_penalty",
    "target_length_bonus",
    "calibration_reward",
    "stated_confidence",
]
