"""What a prompt is worth drawing, from its estimated pass rate: the maths of the weighted
curricula (tasks/curriculum.py draws prompts in proportion to a weighting plus a floor).

A prompt's pass rate p is estimated from its samples so far with a Beta prior: the posterior
mean (right + w m) / (tried + w), a prior of mean m worth w samples. m = 1/2, w = 2 is
Laplace's rule, (right + 1) / (tried + 2); m = the pass rate of all the pool's samples so far
lets what the run learned about other prompts stand in for a prompt not tried yet (after
GPS's shared predictive model of difficulty, reduced to its mean)."""

from __future__ import annotations

import math
from collections.abc import Callable


def pass_rate(right: int, tried: int, prior_mean: float = 0.5, prior_weight: float = 2.0) -> float:
    """Posterior mean of a prompt's pass rate: prior_mean for a prompt never tried, moving to
    right / tried as samples come in."""
    return (right + prior_weight * prior_mean) / (tried + prior_weight)


def variance_weight(p: float, target_p: float | None, width: float) -> float:
    """p (1 - p), the variance of a sample's outcome: groups of such prompts have an
    advantage (VCRL). It peaks at p = 1/2; target_p and width are not used."""
    return p * (1 - p)


def target_weight(p: float, target_p: float | None, width: float) -> float:
    """exp(-(p - target_p)^2 / (2 width^2)): 1 at the pass rate aimed at, e^(-1/2) one width
    away. A small target_p leans to the prompts the policy still fails (RCS); 1/2 to those of
    intermediate difficulty (GPS)."""
    if target_p is None:
        raise ValueError("target_weight needs target_p")
    return math.exp(-((p - target_p) ** 2) / (2 * width**2))


# curriculum.weighting -> weight(p, target_p, width); "uniform" is epoch order, no weighting
PROMPT_WEIGHTINGS: dict[str, Callable[[float, float | None, float], float]] = {
    "variance": variance_weight,
    "target": target_weight,
}
