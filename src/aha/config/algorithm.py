"""The algorithm section: how an RL step turns rewards into an update (advantage estimator,
policy loss, KL, shaping, dynamic sampling, replay); aha.config puts it with the others."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from aha.config.sections import ANSWER_HINT, Strict


class AlgorithmConfig(Strict):
    """Which advantage estimator, policy loss, KL and shaping a run uses (docs/paper_index.md)."""

    # advantages
    advantage: Literal["grpo", "rloo", "reinforce_pp", "remax", "gae"] = Field(
        "grpo", description="grpo (group mean), rloo (leave-one-out), reinforce_pp (global normalisation), "
                            "remax (greedy baseline), gae (learned critic)")
    advantage_scale: Literal["std", "none"] = Field("std", description="grpo: divide by the group std (GRPO) or not "
            "(Dr. GRPO)")
    group_baseline: bool = Field(True, description="reinforce_pp: subtract the group mean before normalising "
                                                   "(REINFORCE++-baseline)")
    gamma: float = Field(1.0, ge=0, le=1, description="discount over completion tokens (reinforce_pp, gae)")
    lam: float = Field(1.0, ge=0, le=1, description="GAE lambda")
    whiten_advantages: bool = Field(False, description="normalise advantages over the batch's valid tokens (usual with "
                                                       "gae)")
    token_weighting: Literal["none", "ktae"] = Field("none", description="ktae: weight tokens by how much more often "
            "they occur in a group's better rollouts")
    ktae_alpha: float = Field(0.5, ge=0, le=1, description="ktae: a token's weight is 1 +- alpha times its direction "
                                                           "score")
    step_advantages: bool = Field(False, description="grpo, rloo: judge each step reward (a PRM's aggregate: dense, "
            "StepScores, an environment's turns) against its group's steps and pay each token those of its step and "
            "the later ones (process-supervised GRPO, PRIME); the rest of the reward keeps the estimator's advantage")
    # policy loss
    policy_loss: Literal["ppo", "gspo", "cispo", "pg", "sapo", "gmpo"] = Field("ppo", description="ppo clipped "
            "surrogate, gspo sequence ratio, cispo clipped-weight REINFORCE, pg plain on-policy, sapo smooth gate "
            "instead of a clip, gmpo geometric mean of a sequence's token ratios")
    clip_low: float = Field(0.2, ge=0, description="the ratio is clipped below at 1 - clip_low (gmpo: log r below at "
                                                   "-clip_low)")
    clip_high: float = Field(0.28, ge=0, description="> clip_low is DAPO's clip-higher (gmpo: log r above at "
                                                     "clip_high)")
    sapo_tau_pos: float = Field(1.0, gt=0, description="sapo: temperature of the gate for positive advantages (larger "
                                                       "= narrower trust region)")
    sapo_tau_neg: float = Field(1.05, gt=0, description="sapo: temperature of the gate for negative advantages (the "
                                                        "paper: above sapo_tau_pos)")
    dual_clip: float | None = Field(None, gt=1, description="cap the loss of negative-advantage tokens at dual_clip * "
                                                            "|A| (ppo)")
    loss_agg: Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant"] = Field(
        "token_mean", description="token_mean: every token of the batch weighs the same (DAPO); seq_mean_token_sum: "
                                  "per-sequence sums averaged; seq_mean_token_mean: per-sequence means averaged "
                                  "(GRPO); constant: sum / (sequences x loss_agg_constant) (Dr. GRPO)")
    loss_agg_constant: int | None = Field(None, ge=1, description="the constant of loss_agg=constant; default "
            "rollout.max_new_tokens")
    epochs: int = Field(1, ge=1, description="passes over each rollout batch")
    mini_batches: int = Field(1, ge=1, description="optimizer steps per pass (the batch is split into this many parts, "
                                                   "whole groups each)")
    old_logprobs: Literal["engine", "trainer"] = Field("engine", description="ratio denominator: the engine's sampling "
            "log-probs, or the trainer's recomputed ones")
    tis_cap: float | None = Field(None, gt=0, description="truncated importance sampling: weight tokens by "
                                                          "min(pi_trainer / pi_engine, cap); needs "
                                                          "old_logprobs=trainer")
    is_level: Literal["token", "sequence"] = Field("token", description="tis_cap's ratio pi_trainer / pi_engine: per "
            "token, or one per sequence (the product of its tokens')")
    is_mode: Literal["truncate", "mask"] = Field("truncate", description="truncate: weight = the ratio clamped into "
            "[is_low, tis_cap] (TIS); mask: the ratio inside that band, 0 outside (sequence: MIS; token: IcePop)")
    is_low: float = Field(0.0, ge=0, description="lower end of the importance-weight band (IcePop: e.g. 0.5); 0 = none")
    # KL and entropy
    kl_coef: float = Field(0.0, ge=0, description="KL to the reference model; 0 loads no reference model")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="Schulman's estimators of KL(policy || "
            "reference) at a sampled token, r = pi_ref / pi: k1 = -log r (unbiased, may be negative), k2 = (log r)^2 / "
            "2 (biased, low variance), k3 = r - 1 - log r (unbiased, >= 0)")
    kl_in: Literal["loss", "reward"] = Field("loss", description="add the KL term to the loss, or subtract it from "
            "per-token rewards")
    ref_reset_every: int = Field(0, ge=0, description="copy the policy into the reference every N steps (ProRL); 0 = "
                                                      "never")
    ref_reset_kl: float | None = Field(None, gt=0, description="also reset when the step's KL to the reference exceeds "
                                                               "this")
    ref_reset_optimizer: bool = Field(True, description="reset the optimizer state at each reference reset (ProRL)")
    entropy_coef: float = Field(0.0, description="entropy bonus: loss -= entropy_coef * entropy")
    # distillation from a teacher (on-policy)
    teacher: str | None = Field(None, description="on-policy distillation: a model folder (a run's checkpoints/step-N) "
            "or a built-in name (smollm2-135m, tiny) or a Hub id (owner/name[@revision]) with the policy's tokenizer; "
            "every sampled token's advantage gains -teacher_coef * (log pi_old - log pi_teacher), the reverse KL to "
            "the teacher. Relative paths are to the working directory, like model")
    teacher_coef: float = Field(1.0, ge=0, description="weight of the teacher's per-token reverse-KL term in the "
                                                       "advantage")
    task_reward: bool = Field(True, description="false: the task reward is still computed and logged but gives no "
            "advantage, so only the teacher's term trains (needs teacher, and dynamic_sampling=false)")
    # guidance for prompts the policy never solves (ExPO)
    guidance: Literal["none", "expo"] = Field("none", description="expo: in a group where no completion passes, the "
            "policy is asked again with the answer shown (guidance_hint); a retry that passes replaces one of the "
            "group's completions, trained as an answer to the prompt without the hint (its old log-probs the "
            "policy's own on that prompt, its advantage capped at guidance_cap). Needs an answer on every sample")
    guidance_hint: str = Field(ANSWER_HINT, description="expo: the retry's prompt "
            "({prompt} and {answer}; a chat prompt's last user turn is the {prompt})")
    guidance_tries: int = Field(2, ge=1, description="expo: retries sampled per unsolved group; the first that passes "
            "(reward total >= length_correct_min; not cut at the budget where truncated_reward or mask_truncated is "
            "set) is used")
    guidance_cap: float = Field(1.0, gt=0, description="expo: the largest advantage a guided completion gets (one "
            "right among G-1 wrong has sqrt(G-1) under advantage_scale=std)")
    # critic (gae)
    critic_lr: float = Field(1e-5, description="gae: learning rate of the value model")
    value_clip: float | None = Field(0.2, gt=0, description="gae: PPO value clipping around the rollout-time values")
    # sampling and reward shaping
    dynamic_sampling: bool = Field(True, description="drop groups whose rewards are all equal and refill with new "
                                                     "prompts (DAPO)")
    max_rounds: int = Field(3, ge=1, description="generation rounds per step when refilling")
    truncated_reward: float | None = Field(None, description="reward of a completion cut at max_new_tokens (no EOS); "
                                                             "None keeps its score")
    mask_truncated: bool = Field(False, description="give truncated completions no loss at all (DAPO's overlong "
                                                    "filtering)")
    overlong_buffer: int = Field(0, ge=0, description="DAPO soft overlong punishment over the last N tokens of "
                                                      "max_new_tokens; 0 = off")
    overlong_penalty: float = Field(1.0, ge=0, description="penalty at max_new_tokens")
    length_coef: float = Field(0.0, ge=0, description="length penalty: reward -= coef * tokens / max_new_tokens; the "
                                                      "start value when length_adaptive")
    length_penalize: Literal["correct", "all"] = Field("correct", description="which completions pay the length "
            "penalty (A-DLP: all)")
    length_adaptive: bool = Field(False, description="A-DLP: length_coef += length_coef_rate * (batch accuracy - "
                                                     "length_target_acc) each step")
    length_target_acc: float = Field(0.8, ge=0, le=1, description="length_adaptive: the accuracy above which the "
            "penalty grows (A-DLP: the reference model's)")
    length_coef_rate: float = Field(0.05, gt=0, description="length_adaptive: the controller's rate")
    length_coef_max: float = Field(1.0, ge=0, description="length_adaptive: the largest length_coef")
    length_correct_min: float = Field(1.0, description="a completion counts as correct (accuracy, length_penalize) "
                                                       "when its reward total >= this")
    length_adaptive_per: Literal["batch", "prompt"] = Field("batch", description="length_adaptive: one coefficient "
            "updated from the batch's accuracy (A-DLP), or one per prompt updated from its own group's accuracy")
    length_shaping: Literal["none", "laser_d"] = Field("none", description="laser_d: reward += laser_bonus for a "
            "correct completion no longer than its target, one target per difficulty bucket of its group's pass rate "
            "(easy >= 2/3, medium >= 1/3, hard), adapted each step from the bucket's lengths (LASER-D)")
    laser_bonus: float = Field(0.5, ge=0, description="laser_d: the bonus for a correct completion within its target "
                                                      "(LASER's lambda)")
    laser_expected_correct: int = Field(1, ge=1, description="laser_d: a bucket's target is the shortest length within "
            "which its groups expect this many correct completions (the paper's expected correct responses)")
    reward_noise: float = Field(0.0, ge=0, description="ReDit: scale of zero-mean noise added to rewards; 0 = off")
    reward_noise_kind: Literal["gaussian", "uniform"] = Field("gaussian", description="ReDit: the noise's distribution "
            "(scale: reward_noise)")
    replay: bool = Field(False, description="selective sample replay: fill the batch with past groups of non-zero "
                                            "advantage (VL-Rethinker)")
    replay_capacity: int = Field(64, ge=1, description="groups kept for replay")
    replay_alpha: float = Field(1.0, ge=0, description="replay sampling probability proportional to |A|^alpha")
