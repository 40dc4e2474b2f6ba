"""The sections of the supervised methods (sft, dpo and kto, rm, prm); aha.config puts them
with the others."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from aha.config.sections import ANSWER_HINT, Strict


class SFTConfig(Strict):
    """method: sft. Supervised fine-tuning: the loss is the response tokens' NLL, prompts are context only."""

    data: str | None = Field(None, description="JSONL of {prompt, response}; default: for the built-in arithmetic task "
                                               "a verified worked answer to each training problem (as `aha data` "
                                               "writes), else the task's training samples that carry a response")
    batch_size: int = Field(16, ge=1, description="examples per optimizer step (split into train.micro_batch_size)")
    max_length: int = Field(512, ge=2, description="prompt + response tokens; longer examples lose the end of their "
                                                   "response (counted in sft/truncated)")
    bucket_by_length: bool = Field(True, description="micro-batches of similar lengths (less padding; the loss is the "
                                                     "same)")


class PreferenceConfig(Strict):
    """method: dpo. Preference optimisation on {prompt, chosen, rejected} pairs (algorithms/preference.py)."""

    data: str | None = Field(None, description="JSONL of {prompt, chosen, rejected}; not used with online=true (the "
                                               "pairs come from the policy)")
    eval_data: str | None = Field(None, description="held-out pairs of the same form: preference accuracy and margins "
                                                    "at each held-out evaluation")
    eval_fraction: float | None = Field(None, gt=0, lt=1, description="instead of dpo.eval_data: hold out this share "
                                        "of dpo.data's rows (a fixed shuffle: every run holds out the same rows)")
    loss: Literal["dpo", "ipo", "simpo", "orpo", "kto", "tdpo", "hinge", "bco_pair"] = Field(
        "dpo", description="dpo (cDPO with label_smoothing > 0), ipo, simpo and orpo (these two need no reference "
                           "model); kto learns from single completions labelled desirable or not: data rows {prompt, "
                           "completion, label} or pairs (chosen: desirable, rejected: undesirable); tdpo (token-level "
                           "DPO: keeps a frozen reference model in memory for its per-token KL), hinge (SLiC / RSO), "
                           "bco_pair (BCO's classifier on each completion of a pair)")
    beta: float = Field(0.1, gt=0, description="inverse temperature of the implicit reward (simpo: 2.0 in the paper)")
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, description="cDPO / robust DPO: the share of pairs assumed "
            "flipped")
    simpo_gamma: float = Field(0.5, ge=0, description="simpo: the target reward margin gamma")
    batch_size: int = Field(8, ge=1, description="pairs per optimizer step (split into train.micro_batch_size "
                                                 "sequences); online: prompts sampled per step")
    max_length: int = Field(512, ge=2, description="prompt + completion tokens; longer completions lose their end")
    nll_coef: float = Field(0.0, ge=0, description="RPO (Pang et al. 2024): add nll_coef * the chosen completion's "
                                                   "per-token NLL to each pair's loss, so the chosen answers' "
                                                   "likelihood is held up while the margin grows (TRL's rpo_alpha; the "
                                                   "paper uses 1.0); orpo has this term already")
    online: bool = Field(False, description="online DPO: each step samples dpo.online_samples completions per training "
                                            "prompt of the task from the current policy (rollout.temperature, "
                                            "max_new_tokens), ranks them by the run's reward and trains on best vs "
                                            "worst; prompts whose samples all score the same give no pair")
    online_samples: int = Field(4, ge=2, description="online: completions sampled per prompt")
    kto_desirable_weight: float = Field(1.0, gt=0, description="kto: lambda_D, the weight of a desirable completion's "
                                                               "loss (the paper keeps lambda_D * n_D / (lambda_U * "
                                                               "n_U) within [1, 4/3])")
    kto_undesirable_weight: float = Field(1.0, gt=0, description="kto: lambda_U, the weight of an undesirable "
            "completion's loss")
    tdpo_version: Literal[1, 2] = Field(2, description="tdpo: 1 subtracts beta * (KL_rejected - KL_chosen) from the "
            "margin; 2 (the paper's recommended) alpha * beta * (KL_rejected - KL_chosen without gradient)")
    tdpo_alpha: float = Field(0.5, gt=0, description="tdpo, tdpo_version=2: the weight alpha of the sequential KL "
                                                     "term (the paper's default 0.5)")
    offset: Literal["none", "log", "linear"] = Field("none", description="loss=dpo: ODPO's offset from each pair's "
            "reward gap (online: the run's reward of chosen minus rejected; data: chosen_score - rejected_score, or "
            "a margin field), offset_alpha * log(gap) or offset_alpha * gap; the margin must exceed it")
    offset_alpha: float = Field(1.0, gt=0, description="offset: the scale alpha of the offset (ODPO's default 1)")


class RewardModelConfig(Strict):
    """method: rm. A reward model: a linear head on the model's last hidden state, trained on
    {prompt, chosen, rejected} pairs with the Bradley-Terry loss (training/supervised/reward_model.py)."""

    data: str = Field("", description="JSONL of {prompt, chosen, rejected}; optional margin (a number, with "
                                      "rm.margin=data) and subset (held-out accuracy per subset)")
    eval_data: str | None = Field(None, description="held-out pairs of the same form: pairwise accuracy overall and "
                                                    "per subset at each held-out evaluation")
    batch_size: int = Field(16, ge=1, description="pairs per optimizer step; a pair's two sequences share a "
                                                  "micro-batch of train.micro_batch_size sequences")
    max_length: int = Field(512, ge=2, description="prompt + completion tokens; longer completions lose their end "
                                                   "(counted in rm/truncated)")
    margin: Literal["none", "data"] = Field("none", description="data: each pair's `margin` field is the score gap it "
                                                                "must exceed, -log sigma(r_w - r_l - m) (Llama 2)")
    pcrm: bool = Field(False, description="PCRM (Zhou et al. 2024): also cap the score gap at delta* = pcrm_beta1 / "
                                          "(similarity + pcrm_beta2) + pcrm_beta3, tighter the more alike a pair's "
                                          "completions are")
    pcrm_similarity: Literal["length_ratio", "cosine"] = Field("length_ratio", description="pcrm: the pair's "
            "similarity, from the token lengths after their common prefix, or the cosine of their final hidden states")
    pcrm_beta1: float = Field(20.0, gt=0, description="pcrm: scale of the cap (the authors' scripts: 20)")
    pcrm_beta2: float = Field(0.001, gt=0, description="pcrm: keeps the cap finite at similarity 0")
    pcrm_beta3: float = Field(-15.0, description="pcrm: offset of the cap (the authors' scripts: -13 to -19)")
    heads: int = Field(1, ge=1, description="linear heads on one shared body; > 1 is an ensemble, each head trained on "
                                            "its own bootstrap resample of the pairs")
    ensemble_score: Literal["mean", "min", "mean_minus_std"] = Field("mean", description="heads > 1: the reward is the "
            "heads' mean, their min, or mean - ensemble_k * std (a pessimistic reward against over-optimisation)")
    ensemble_k: float = Field(1.0, ge=0, description="ensemble_score=mean_minus_std: the k")


class ProcessRewardConfig(Strict):
    """method: prm. A process reward model: a scalar head read at the token closing each step
    of a solution, trained with binary cross-entropy on 0/1 step labels (training/supervised/prm.py)."""

    data: str = Field("", description="JSONL of {prompt, steps: [str], labels: [0|1]}, one label a step")
    eval_data: str | None = Field(None, description="held-out solutions of the same form: step, solution and "
                                                    "first-error accuracy at each held-out evaluation")
    batch_size: int = Field(16, ge=1, description="solutions per optimizer step (split into train.micro_batch_size "
                                                  "solutions)")
    max_length: int = Field(512, ge=2, description="prompt + solution tokens; steps that do not close within it are "
                                                   "not scored (counted in prm/truncated_steps)")
    step_separator: str = Field("\n", min_length=1, description="what joins the steps into the completion the policy "
                                                                "writes; a step is scored at the token that closes it "
                                                                "(this separator, or the stop token after the last "
                                                                "step)")


class RFTConfig(Strict):
    """method: rft. Expert iteration / rejection-sampling fine-tuning (STaR, RFT): each round samples completions
    from the current policy, keeps those the reward passes, and takes supervised steps on them
    (training/supervised/rft.py)."""

    prompts_per_round: int = Field(32, ge=1, description="training prompts sampled at the start of each round (in "
                                                         "the task's shuffled order, epoch after epoch)")
    samples: int = Field(8, ge=1, description="completions sampled per prompt per round (at rollout.temperature, up "
                                              "to rollout.max_new_tokens tokens)")
    threshold: float = Field(1.0, description="a completion is kept when its reward total >= threshold (and the "
                                              "reward did not fail on it, and it was not cut at max_new_tokens)")
    keep: Literal["all", "distinct", "one"] = Field("distinct", description="of a prompt's passing completions keep "
            "all, one of each distinct text (RFT), or only the first (STaR)")
    rationalize: bool = Field(False, description="STaR's rationalisation: a prompt none of whose samples passed is "
                                                 "asked again with its answer shown (rft.hint); passing retries are "
                                                 "learned as answers to the prompt without the hint")
    hint: str = Field(ANSWER_HINT, description="rationalize: the retry's prompt; "
                      "{prompt} is the question (a chat prompt's last user turn), {answer} the sample's answer")
    steps_per_round: int = Field(2, ge=1, description="optimizer steps on each round's kept completions before the "
                                                      "next round samples (a round that keeps nothing is sampled "
                                                      "again at the next step)")
    batch_size: int = Field(16, ge=1, description="kept completions per optimizer step (cycling through the round's "
                                                  "in a shuffled order; split into train.micro_batch_size)")
