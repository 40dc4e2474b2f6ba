"""The training diagnosis (aha/training/diagnosis.py): the thresholds of its flags."""

from __future__ import annotations

from pydantic import Field

from aha.config.sections import Strict


class DiagnosisConfig(Strict):
    """Flags for a run going wrong during RL, each raised once with the step its condition began.
    A series is smoothed (the median of `window` trailing steps) and compared with its start (the
    median of its first baseline_steps values); a condition must hold `patience` steps in a row
    (a gradient-norm spike: one step). The defaults keep the quickstart demo silent."""

    enabled: bool = Field(True, description="watch for the flags during RL training (console, log.txt, "
                                            "diagnosis.json, the report's warnings)")
    baseline_steps: int = Field(3, ge=1, description="first steps whose median is a series' start")
    window: int = Field(5, ge=1, description="a series is smoothed by the median of this many trailing steps")
    patience: int = Field(3, ge=1, description="consecutive steps a condition must hold to raise its flag")
    entropy_drop: float = Field(0.9, gt=0, lt=1, description="flag entropy_collapse: the policy's entropy (at the "
                                                             "sampled tokens) fell by this share of its start...")
    entropy_min: float = Field(0.05, gt=0, description="...and below this many nats per token")
    reward_rise: float = Field(0.2, gt=0, description="flag reward_collapse: the mean reward first rose this much "
                                                      "above its start (in the reward's own units)...")
    reward_fall: float = Field(0.5, gt=0, le=1, description="...then gave back this share of its best gain")
    informative_min: float = Field(0.05, ge=0, lt=1, description="flag informative_groups_gone: the share of "
            "groups whose rewards differ (1 - groups/zero_variance_frac), above this at the start, fell to this or "
            "below")
    kl_ref_max: float = Field(1.0, gt=0, description="flag kl_blowup: kl/ref (with algorithm.kl_coef > 0) above this "
                                                     "many nats per token...")
    kl_old_max: float = Field(0.2, gt=0, description="...or kl/old (how far the update moved off the sampling "
                                                     "policy) above this")
    clip_frac_max: float = Field(0.3, gt=0, le=1, description="flag clip_blowup: policy/clip_frac above this")
    grad_spike_factor: float = Field(10.0, gt=1, description="flag grad_norm_spike: a step's grad_norm above this "
                                                             "times the median of the `window` steps before it")
    gap_factor: float = Field(3.0, gt=1, description="flag logprob_gap: logprobs/engine_trainer_abs_diff (mean "
            "|log pi_trainer - log pi_engine| of the sampled tokens) above this times its start (the least of its "
            "first baseline_steps values)...")
    gap_min: float = Field(0.02, gt=0, description="...and above this many nats per token")
