"""Correctness of a completion that ends with a stated confidence: numeric_answer on the text
without its <confidence> spans (the calibration reward's own check). The binary reward and the
held-out scorer of bench/findings/calibration_reward.py: numeric_answer alone reads the last
number, which here is the confidence."""

from aha.rewards import calibration_reward


def correct(completion: str, sample: dict) -> float:
    return calibration_reward(completion, sample, verifier="numeric_answer")["correct"]
