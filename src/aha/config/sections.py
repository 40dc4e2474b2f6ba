"""The sections of a run's config, one pydantic model each (aha.config puts them together)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# the built-in tasks and the reward each trains on unless the config names one (tasks/procedural.py)
BUILT_IN_TASKS = {
    "arithmetic": "aha.rewards:numeric_answer",
    "multi_digit": "aha.rewards:numeric_answer",
    "countdown": "aha.rewards:countdown",
    "shortest_path": "aha.rewards:numeric_answer",
    "connectivity": "aha.rewards:yes_no",
    "cycle": "aha.rewards:yes_no",
    "sorting": "aha.rewards:list_answer",
    "letter_count": "aha.rewards:numeric_answer",
    "linear_equation": "aha.rewards:numeric_answer",
}


class TaskConfig(Strict):
    """A built-in task (`name`) or your data (`data`, `eval_data`, optionally named by `name`)."""

    name: str | None = Field(None, description=f"built-in task: {', '.join(BUILT_IN_TASKS)}; with task.data, the name reports give your task (default: the data file's name)")
    data: str | None = Field(None, description="training data: .jsonl (one {prompt, answer, ...} per line), .json (an array of them), .parquet, .csv / .tsv (a header row), or a folder written by datasets' save_to_disk")
    eval_data: str | None = Field(None, description="held-out data, same formats; may be left out when task.data is a datasets folder with an eval_split")
    prompt_field: str = Field("prompt", description="the field of your rows that holds the prompt (a string or a list of chat messages)")
    answer_field: str = Field("answer", description="the field of your rows that holds the reference answer")
    prompt_template: str | None = Field(None, description="the prompt written from the row's fields, e.g. 'Question: {question}\nChoices: {choices}' (replaces prompt_field; {{ }} for literal braces)")
    stream: bool = Field(False, description="keep task.data and task.eval_data on disk (files larger than memory): one pass checks every row and keeps only where it is and its id; a sample is read back when drawn. JSON lines and CSV/TSV are re-read at the row's byte offset, datasets folders are memory-mapped, Parquet is converted once by datasets to a memory-mapped Arrow file in its cache; not a .json array")
    split: str = Field("train", description="the split task.data names in a datasets folder with several splits")
    eval_split: str = Field("test", description="the split task.eval_data (or, without it, task.data) names in a datasets folder with several splits")
    system_prompt: str | None = Field(None, description="system message; None keeps the model's default")
    few_shot: list[dict[str, Any]] = Field(default_factory=list, description="[{prompt, answer}] chat turns before each question")
    # arithmetic knobs (ignored by JSONL tasks)
    operators: list[Literal["+", "-", "*"]] = Field(["*"], description="arithmetic: the operators its problems use")
    a_min: int = Field(2, description="arithmetic: the smallest first operand")
    a_max: int = Field(30, description="arithmetic: the largest first operand")
    b_min: int = Field(2, description="arithmetic: the smallest second operand")
    b_max: int = Field(9, description="arithmetic: the largest second operand")
    num_eval: int = Field(200, ge=1, description="held-out problems; never overlap training")
    num_train: int = Field(2000, ge=1, description="training problems of a procedural task (arithmetic trains on every other problem of its range)")
    difficulty: int = Field(1, ge=1, description="a procedural task's difficulty: more digits, numbers, nodes, words or terms")
    eval_difficulty: int | None = Field(None, ge=1, description="the held-out problems' difficulty (default: task.difficulty); higher is an out-of-distribution split")
    template: str = Field("What is {a} {op} {b}?", description="question text; {a} {op} {b}")
    seed: int = Field(0, description="a built-in task's split into training and held-out problems (and the problems a procedural task draws)")


class RewardSpec(Strict):
    """One reward: a function (`fn`) or a trained reward model (`model`), exactly one of them."""

    fn: str | None = Field(None, description='"module:function" or "file.py:function"; fn(completion, sample) -> float | dict')
    model: str | None = Field(None, description="a reward model trained with method: rm: its run folder (the newest checkpoint) or a checkpoint folder; scores prompt + completion in batches (args: batch_size, dtype); or a process reward model (method: prm), scoring each step of the completion and aggregating them (args.aggregate: min, sum or mean)")
    weight: float = Field(1.0, description="this component's weight in the total (combine=sum)")
    name: str | None = Field(None, description="the component's name in metrics (reward/<name>) and samples; default: the function's or model's")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments passed to fn, e.g. {rel_tol: 0.01}")
    combine: Literal["sum", "product", "gate"] = Field("sum", description="sum: add weight * value; product: multiply the total; gate: zero the total unless value >= gate_min")
    gate_min: float = Field(1.0, description="combine=gate: the value a gate needs to pass")
    clip_min: float | None = Field(None, description="floor on this reward's value before weighting")
    clip_max: float | None = Field(None, description="cap on this reward's value before weighting (a learned reward: exploiting it stops paying)")
    workers: int = Field(0, ge=0, description="0: call in this process; N: a pool of N worker processes (slow rewards: code, remote checks)")
    timeout_s: float = Field(60.0, gt=0, description="workers >= 1: a call past this many seconds is killed and scores as failed")

    @model_validator(mode="after")
    def _clip_order(self):
        if (self.fn is None) == (self.model is None):
            raise ValueError("a reward needs exactly one of fn (a function) and model (a trained reward model)")
        if self.clip_min is not None and self.clip_max is not None and self.clip_min > self.clip_max:
            raise ValueError(f"clip_min ({self.clip_min}) is above clip_max ({self.clip_max})")
        return self


class RolloutConfig(Strict):
    """How a step samples: prompts and group size, token budget, temperature, the engine,
    asynchronous and partial rollouts, and the rollout interventions."""

    prompts_per_step: int = Field(8, ge=1, description="distinct prompts sampled per generation round")
    group_size: int = Field(8, ge=1, description="completions per prompt (G)")
    max_new_tokens: int = Field(64, ge=1, description="new tokens a completion may have (a turn, in a multi-turn episode); one cut there is truncated")
    temperature: float = Field(1.0, gt=0, description="sampling temperature; the learner's log-probs are taken at the same one")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling: keep the smallest set of tokens whose probability reaches top_p")
    batch_size: int = Field(64, ge=1, description="sequences per generate() call (memory bound)")
    engine: Literal["auto", "vllm", "hf"] = Field("auto", description="the sampling engine: vllm (vLLM in its own environment, `make vllm`; the policy's weights handed over after each step), hf (sampling on the policy's own modules, a lean decoding step for Llama models); auto: vllm for budgets over 64 new tokens of models without the lean step, where an environment with it is found and starts, else hf")
    max_staleness: int = Field(0, ge=0, description="asynchronous RL: 0 samples each step on the newest weights; k >= 1 samples the next k steps' first rounds ahead, on the rollout workers while the learner updates, so a sample may be up to k policy versions old (the ratio's denominator is the engine's log-probs of the policy that drew it; add old_logprobs=trainer and tis_cap to correct toward the current one). With partial_rollouts a continued completion's first tokens can be older. Needs ray.rollout_workers")
    partial_rollouts: int = Field(0, ge=0, description="partial rollouts (APRIL): 0 samples every group of a round to the end; n >= 1 launches n groups beyond prompts_per_step, stops sampling once prompts_per_step groups are complete, and carries the completions still going (tokens and sampling log-probs so far) into the next round, where they continue first on the newer weights (any engine, asynchronous RL included). Let rollout.batch_size hold the whole round, (prompts_per_step + n) x group_size, for the HF engine to stop it early")
    temperatures: list[Annotated[float, Field(gt=0)]] | None = Field(None, min_length=1, description="multi-temperature sampling within a group: row j of each group is drawn at temperatures[j mod K] (e.g. [0.6, 1.0, 1.4]), its log-probs in the sampler and the learner at its own; none: every row at rollout.temperature")
    force_continue: int = Field(0, ge=0, description="forced continuation after an early stop (s1's budget forcing): a completion that stops on its stop token is made to go on up to this many times, its stop token replaced by rollout.continue_text, each time for up to max_new_tokens more tokens; the inserted text is read by the learner but never trained")
    continue_text: str = Field("Wait", min_length=1, description="what replaces a forced completion's stop token (rollout.force_continue)")
    vllm_python: str | None = Field(None, description="the Python of an environment with vLLM; unset: $AHA_VLLM_PYTHON, else .venv-vllm/bin/python beside aha's environment")


class TrainConfig(Strict):
    """Optimisation and bookkeeping; the RL maths lives in `algorithm`."""

    steps: int = Field(100, ge=0, description="RL steps: one rollout batch each")
    lr: float = Field(1e-6, ge=0, description="AdamW learning rate; 1e-6 (TRL's GRPO default) suits models of 1B and up, the recipes use 3e-5 for the 135M model")
    weight_decay: float = Field(0.0, ge=0, description="AdamW's decoupled weight decay")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW's beta1 and beta2")
    micro_batch_size: int = Field(16, ge=1, description="sequences per forward/backward (memory only: gradients accumulate, results do not change)")
    max_grad_norm: float = Field(1.0, gt=0, description="clip the gradient's global norm to this before each optimizer step")
    share_prompt: bool = Field(True, description="run each group's prompt once in the learner (same gradients, less compute)")
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="compute dtype; auto = bf16 autocast only where the CPU has native bf16")
    checkpoint_every: int = Field(50, ge=0, description="write a checkpoint every N steps (and always at the last step and on Ctrl-C); 0: only then")
    keep_checkpoints: int = Field(2, ge=1, description="the newest checkpoints kept; older ones are deleted once a newer one is whole")
    keep_best: bool = Field(False, description="also keep the checkpoint with the best held-out accuracy (of those evaluated at a checkpoint's step: make eval.every a multiple of checkpoint_every); ties keep the later one")
    resume: bool = Field(True, description="continue from the run folder's newest checkpoint, if it has one; false starts again from step 0 (the folder's metrics and samples are written anew)")
    log_samples: int = Field(4, ge=0, description="completions per step written to samples.jsonl")
    report: bool = Field(True, description="write runs/<name>/report.html (a plot of every logged metric) when the run ends; `aha report RUN` rebuilds it at any time")
    max_reward_failure_rate: float = Field(0.5, ge=0, le=1, description="stop the run, before its update, when a step's reward failed (raised, timed out, returned NaN/inf or a non-number) on more than this share of its samples; 1.0 never stops")
    max_idle_steps: int | None = Field(None, ge=1, description="stop the run after this many consecutive steps with nothing to train on (no sample with a non-zero advantage: train/nothing_to_train); none: never")
    allow_config_change: bool = Field(False, description="resume a run whose config.yaml differs in keys that change what is trained (not model); the change and its step go to config_history.jsonl")


class AlgorithmConfig(Strict):
    """Which advantage estimator, policy loss, KL and shaping a run uses (docs/paper_index.md)."""

    # advantages
    advantage: Literal["grpo", "rloo", "reinforce_pp", "remax", "gae"] = Field(
        "grpo", description="grpo (group mean), rloo (leave-one-out), reinforce_pp (global normalisation), "
                            "remax (greedy baseline), gae (learned critic)")
    advantage_scale: Literal["std", "none"] = Field("std", description="grpo: divide by the group std (GRPO) or not (Dr. GRPO)")
    group_baseline: bool = Field(True, description="reinforce_pp: subtract the group mean before normalising (REINFORCE++-baseline)")
    gamma: float = Field(1.0, ge=0, le=1, description="discount over completion tokens (reinforce_pp, gae)")
    lam: float = Field(1.0, ge=0, le=1, description="GAE lambda")
    whiten_advantages: bool = Field(False, description="normalise advantages over the batch's valid tokens (usual with gae)")
    token_weighting: Literal["none", "ktae"] = Field("none", description="ktae: weight tokens by how much more often they occur in a group's better rollouts")
    ktae_alpha: float = Field(0.5, ge=0, le=1, description="ktae: a token's weight is 1 +- alpha times its direction score")
    # policy loss
    policy_loss: Literal["ppo", "gspo", "cispo", "pg"] = Field("ppo", description="ppo clipped surrogate, gspo sequence ratio, cispo clipped-weight REINFORCE, pg plain on-policy")
    clip_low: float = Field(0.2, ge=0, description="the ratio is clipped below at 1 - clip_low")
    clip_high: float = Field(0.28, ge=0, description="> clip_low is DAPO's clip-higher")
    dual_clip: float | None = Field(None, gt=1, description="cap the loss of negative-advantage tokens at dual_clip * |A| (ppo)")
    loss_agg: Literal["token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "constant"] = Field(
        "token_mean", description="token_mean: every token of the batch weighs the same (DAPO); seq_mean_token_sum: per-sequence sums averaged; seq_mean_token_mean: per-sequence means averaged (GRPO); constant: sum / (sequences x loss_agg_constant) (Dr. GRPO)")
    loss_agg_constant: int | None = Field(None, ge=1, description="the constant of loss_agg=constant; default rollout.max_new_tokens")
    epochs: int = Field(1, ge=1, description="passes over each rollout batch")
    mini_batches: int = Field(1, ge=1, description="optimizer steps per pass (the batch is split into this many parts, whole groups each)")
    old_logprobs: Literal["engine", "trainer"] = Field("engine", description="ratio denominator: the engine's sampling log-probs, or the trainer's recomputed ones")
    tis_cap: float | None = Field(None, gt=0, description="truncated importance sampling: weight tokens by min(pi_trainer / pi_engine, cap); needs old_logprobs=trainer")
    # KL and entropy
    kl_coef: float = Field(0.0, ge=0, description="KL to the reference model; 0 loads no reference model")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="Schulman's estimators of KL(policy || reference) at a sampled token, r = pi_ref / pi: k1 = -log r (unbiased, may be negative), k2 = (log r)^2 / 2 (biased, low variance), k3 = r - 1 - log r (unbiased, >= 0)")
    kl_in: Literal["loss", "reward"] = Field("loss", description="add the KL term to the loss, or subtract it from per-token rewards")
    ref_reset_every: int = Field(0, ge=0, description="copy the policy into the reference every N steps (ProRL); 0 = never")
    ref_reset_kl: float | None = Field(None, gt=0, description="also reset when the step's KL to the reference exceeds this")
    ref_reset_optimizer: bool = Field(True, description="reset the optimizer state at each reference reset (ProRL)")
    entropy_coef: float = Field(0.0, description="entropy bonus: loss -= entropy_coef * entropy")
    # critic (gae)
    critic_lr: float = Field(1e-5, description="gae: learning rate of the value model")
    value_clip: float | None = Field(0.2, gt=0, description="gae: PPO value clipping around the rollout-time values")
    # sampling and reward shaping
    dynamic_sampling: bool = Field(True, description="drop groups whose rewards are all equal and refill with new prompts (DAPO)")
    max_rounds: int = Field(3, ge=1, description="generation rounds per step when refilling")
    truncated_reward: float | None = Field(None, description="reward of a completion cut at max_new_tokens (no EOS); None keeps its score")
    mask_truncated: bool = Field(False, description="give truncated completions no loss at all (DAPO's overlong filtering)")
    overlong_buffer: int = Field(0, ge=0, description="DAPO soft overlong punishment over the last N tokens of max_new_tokens; 0 = off")
    overlong_penalty: float = Field(1.0, ge=0, description="penalty at max_new_tokens")
    length_coef: float = Field(0.0, ge=0, description="length penalty: reward -= coef * tokens / max_new_tokens; the start value when length_adaptive")
    length_penalize: Literal["correct", "all"] = Field("correct", description="which completions pay the length penalty (A-DLP: all)")
    length_adaptive: bool = Field(False, description="A-DLP: length_coef += length_coef_rate * (batch accuracy - length_target_acc) each step")
    length_target_acc: float = Field(0.8, ge=0, le=1, description="length_adaptive: the accuracy above which the penalty grows (A-DLP: the reference model's)")
    length_coef_rate: float = Field(0.05, gt=0, description="length_adaptive: the controller's rate")
    length_coef_max: float = Field(1.0, ge=0, description="length_adaptive: the largest length_coef")
    length_correct_min: float = Field(1.0, description="a completion counts as correct (accuracy, length_penalize) when its reward total >= this")
    reward_noise: float = Field(0.0, ge=0, description="ReDit: scale of zero-mean noise added to rewards; 0 = off")
    reward_noise_kind: Literal["gaussian", "uniform"] = Field("gaussian", description="ReDit: the noise's distribution (scale: reward_noise)")
    replay: bool = Field(False, description="selective sample replay: fill the batch with past groups of non-zero advantage (VL-Rethinker)")
    replay_capacity: int = Field(64, ge=1, description="groups kept for replay")
    replay_alpha: float = Field(1.0, ge=0, description="replay sampling probability proportional to |A|^alpha")


class MonitorConfig(Strict):
    """The reward-hacking monitor (aha/training/monitor.py)."""

    gold: list[RewardSpec] = Field(default_factory=list, description="held-out gold reward, scored on every step's completions and never trained on")
    baseline_steps: int = Field(3, ge=1, description="steps averaged for each series' starting point")
    window: int = Field(5, ge=1, description="steps of moving average before comparing with the start")
    patience: int = Field(3, ge=1, description="consecutive steps a condition must hold to raise its flag")
    gap_threshold: float = Field(0.2, gt=0, description="flag gap: trained-reward gain minus gold gain above this (in reward units)")
    gold_drop: float = Field(0.5, gt=0, le=1, description="flag gold_drop: trained reward up while gold fell below (1 - this) of its start")
    repetition_ngram: int = Field(4, ge=1, description="word n-grams for the repetition measure")
    repetition_rise: float = Field(0.2, gt=0, description="flag repetition: repeated n-gram fraction up by this")
    length_factor: float = Field(2.0, gt=1, description="flag length: mean length above this times the start")
    format_components: list[str] = Field(default_factory=list, description="reward names that only check format")
    format_gain: float = Field(0.2, gt=0, description="flag format_only: format components up by this...")
    gold_gain_min: float = Field(0.05, description="...while gold gained less than this")


class EvalConfig(Strict):
    """Held-out evaluation: when it runs during training, on how much, and what counts as right."""

    before: bool = Field(True, description="greedy held-out accuracy before training")
    after: bool = Field(True, description="and after")
    every: int = Field(0, ge=0, description="also every N steps; 0 = never")
    limit: int | None = Field(None, description="evaluate only the first N held-out samples")
    max_new_tokens: int | None = Field(None, description="default: rollout.max_new_tokens")
    scorer: str = Field(
        "reward", description="what counts as right on a held-out sample: 'reward' (the run's reward list: right when "
        "the total >= correct_threshold), 'reward.<name>' (one component of it, unweighted; <name>/<key> for one part "
        "of a dict-valued reward), or a function (a built-in name like numeric_answer, module:function or "
        "file.py:function) whose value, averaged, is the accuracy. A sample it cannot score (raises, None, NaN) "
        "stops the evaluation with an error naming it")
    correct_threshold: float = Field(
        1.0, description="with scorer reward / reward.<name>: the value that counts as right. 1.0 = one full "
        "correctness point, so a 0/1 verifier plus a format bonus below 1 counts only right answers; with a negative "
        "term (length penalty) or another scale, lower it or name the verifier with reward.<name>")
    rank_by: list[RewardSpec] = Field(default_factory=list, description="with aha eval --samples: rewards (a reward model, a judge, a verifier) that each score every sample; each adds a best-of-k and a weighted-voting curve named after it")


class LoraConfig(Strict):
    """Low-rank adapters (peft) on the trained model instead of training every weight: the
    policy, or with method rm / prm the reward model's body (its heads train whole)."""

    rank: int = Field(0, ge=0, description="LoRA rank r of the policy's adapters; 0 trains every weight (no adapters)")
    alpha: float | None = Field(None, gt=0, description="the adapters' update is scaled by alpha / rank; default 2 x rank")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="the Linear layers that get adapters, by name (q_proj, v_proj, ...); all-linear: every one but the LM head")


class RayConfig(Strict):
    """Sampling on Ray rollout workers (actors), the learner staying in this process."""

    rollout_workers: int = Field(0, ge=0, description="0: sample in this process; N: N Ray actors, each with its own engine (HF, or vLLM with rollout.engine=vllm) and copy of the policy, sample a share of each step's prompts")
    address: str | None = Field(None, description="a running Ray cluster to join (e.g. ray://head:10001 or auto); none: start a local one")
    object_store_mb: int = Field(1024, ge=80, description="a local cluster's object store (the policy's weights pass through it once a step)")
    worker_threads: int = Field(1, ge=1, description="CPU threads (and Ray CPUs) of each rollout worker")
    runtime_env: dict[str, Any] | None = Field(None, description="Ray's runtime environment for the job's workers (pip, env_vars, working_dir, py_modules, ...), as ray.init takes it")
    ship_aha: bool = Field(False, description="add aha's own package to the runtime environment's py_modules, for cluster nodes where aha is not installed (its dependencies still need to be there, or in runtime_env.pip)")
    reward_workers: bool = Field(False, description="run each reward's `workers: N` pool as N Ray actors (on the cluster, deadlines and replacement as with local processes) instead of local processes")


class CurriculumConfig(Strict):
    """Which prompts an RL run spends rollouts on (tasks/curriculum.py)."""

    filter: bool = Field(False, description="online difficulty filtering: a prompt whose latest group was all right or all wrong (no advantage) sits out its next retest_after turns, then is tried again")
    retest_after: int = Field(2, ge=1, description="turns a prompt set aside by filter sits out: the next times epoch-order sampling comes to it (one an epoch), or with weighting variance the next draws (steps)")
    weighting: Literal["uniform", "variance"] = Field("uniform", description="uniform: each epoch a fresh permutation; variance: prompts drawn in proportion to p (1 - p) + floor, p = (right + 1) / (tried + 2) over the prompt's samples so far (1/2 untried)")
    floor: float = Field(0.05, gt=0, description="with weighting variance: the weight every prompt keeps, so none is starved")


class TrackingConfig(Strict):
    """Where metrics go besides metrics.jsonl (always written): each sink is one key."""

    tensorboard: bool = Field(False, description="also write TensorBoard event files to <output_dir>/tensorboard")
    mlflow: bool = Field(False, description="also log to MLflow, by default in a local sqlite database <output_dir>/mlflow.db (or at tracking.mlflow_uri); a resume continues the same MLflow run")
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI; default: sqlite:///<output_dir>/mlflow.db (MLflow 3 refuses a file store unless MLFLOW_ALLOW_FILE_STORE=true)")
    mlflow_experiment: str = Field("aha", description="MLflow experiment name")


class SFTConfig(Strict):
    """method: sft. Supervised fine-tuning: the loss is the response tokens' NLL, prompts are context only."""

    data: str | None = Field(None, description="JSONL of {prompt, response}; default: for the built-in arithmetic task a verified worked answer to each training problem (as `aha data` writes), else the task's training samples that carry a response")
    batch_size: int = Field(16, ge=1, description="examples per optimizer step (split into train.micro_batch_size)")
    max_length: int = Field(512, ge=2, description="prompt + response tokens; longer examples lose the end of their response (counted in sft/truncated)")
    bucket_by_length: bool = Field(True, description="micro-batches of similar lengths (less padding; the loss is the same)")


class PreferenceConfig(Strict):
    """method: dpo. Preference optimisation on {prompt, chosen, rejected} pairs (algorithms/preference.py)."""

    data: str | None = Field(None, description="JSONL of {prompt, chosen, rejected}; not used with online=true (the pairs come from the policy)")
    eval_data: str | None = Field(None, description="held-out pairs of the same form: preference accuracy and margins at each held-out evaluation")
    loss: Literal["dpo", "ipo", "simpo", "orpo", "kto"] = Field(
        "dpo", description="dpo (cDPO with label_smoothing > 0), ipo, simpo and orpo (these two need no reference model); kto learns from single completions labelled desirable or not: data rows {prompt, completion, label} or pairs (chosen: desirable, rejected: undesirable)")
    beta: float = Field(0.1, gt=0, description="inverse temperature of the implicit reward (simpo: 2.0 in the paper)")
    label_smoothing: float = Field(0.0, ge=0, lt=0.5, description="cDPO / robust DPO: the share of pairs assumed flipped")
    simpo_gamma: float = Field(0.5, ge=0, description="simpo: the target reward margin gamma")
    batch_size: int = Field(8, ge=1, description="pairs per optimizer step (split into train.micro_batch_size sequences); online: prompts sampled per step")
    max_length: int = Field(512, ge=2, description="prompt + completion tokens; longer completions lose their end")
    nll_coef: float = Field(0.0, ge=0, description="RPO (Pang et al. 2024): add nll_coef * the chosen completion's per-token NLL to each pair's loss, so the chosen answers' likelihood is held up while the margin grows (TRL's rpo_alpha; the paper uses 1.0); orpo has this term already")
    online: bool = Field(False, description="online DPO: each step samples dpo.online_samples completions per training prompt of the task from the current policy (rollout.temperature, max_new_tokens), ranks them by the run's reward and trains on best vs worst; prompts whose samples all score the same give no pair")
    online_samples: int = Field(4, ge=2, description="online: completions sampled per prompt")
    kto_desirable_weight: float = Field(1.0, gt=0, description="kto: lambda_D, the weight of a desirable completion's loss (the paper keeps lambda_D * n_D / (lambda_U * n_U) within [1, 4/3])")
    kto_undesirable_weight: float = Field(1.0, gt=0, description="kto: lambda_U, the weight of an undesirable completion's loss")


class RewardModelConfig(Strict):
    """method: rm. A reward model: a linear head on the model's last hidden state, trained on
    {prompt, chosen, rejected} pairs with the Bradley-Terry loss (training/reward_model.py)."""

    data: str = Field("", description="JSONL of {prompt, chosen, rejected}; optional margin (a number, with rm.margin=data) and subset (held-out accuracy per subset)")
    eval_data: str | None = Field(None, description="held-out pairs of the same form: pairwise accuracy overall and per subset at each held-out evaluation")
    batch_size: int = Field(16, ge=1, description="pairs per optimizer step; a pair's two sequences share a micro-batch of train.micro_batch_size sequences")
    max_length: int = Field(512, ge=2, description="prompt + completion tokens; longer completions lose their end (counted in rm/truncated)")
    margin: Literal["none", "data"] = Field("none", description="data: each pair's `margin` field is the score gap it must exceed, -log sigma(r_w - r_l - m) (Llama 2)")
    pcrm: bool = Field(False, description="PCRM (Zhou et al. 2024): also cap the score gap at delta* = pcrm_beta1 / (similarity + pcrm_beta2) + pcrm_beta3, tighter the more alike a pair's completions are")
    pcrm_similarity: Literal["length_ratio", "cosine"] = Field("length_ratio", description="pcrm: the pair's similarity, from the token lengths after their common prefix, or the cosine of their final hidden states")
    pcrm_beta1: float = Field(20.0, gt=0, description="pcrm: scale of the cap (the authors' scripts: 20)")
    pcrm_beta2: float = Field(0.001, gt=0, description="pcrm: keeps the cap finite at similarity 0")
    pcrm_beta3: float = Field(-15.0, description="pcrm: offset of the cap (the authors' scripts: -13 to -19)")
    heads: int = Field(1, ge=1, description="linear heads on one shared body; > 1 is an ensemble, each head trained on its own bootstrap resample of the pairs")
    ensemble_score: Literal["mean", "min", "mean_minus_std"] = Field("mean", description="heads > 1: the reward is the heads' mean, their min, or mean - ensemble_k * std (a pessimistic reward against over-optimisation)")
    ensemble_k: float = Field(1.0, ge=0, description="ensemble_score=mean_minus_std: the k")


class ProcessRewardConfig(Strict):
    """method: prm. A process reward model: a scalar head read at the token closing each step
    of a solution, trained with binary cross-entropy on 0/1 step labels (training/prm.py)."""

    data: str = Field("", description="JSONL of {prompt, steps: [str], labels: [0|1]}, one label a step")
    eval_data: str | None = Field(None, description="held-out solutions of the same form: step, solution and first-error accuracy at each held-out evaluation")
    batch_size: int = Field(16, ge=1, description="solutions per optimizer step (split into train.micro_batch_size solutions)")
    max_length: int = Field(512, ge=2, description="prompt + solution tokens; steps that do not close within it are not scored (counted in prm/truncated_steps)")
    step_separator: str = Field("\n", min_length=1, description="what joins the steps into the completion the policy writes; a step is scored at the token that closes it (this separator, or the stop token after the last step)")


class EnvConfig(Strict):
    """Multi-turn episodes (aha.envs): the policy and an environment take turns, the environment's rewards are trained on."""

    name: str | None = Field(None, description="none: single-turn completions scored by the reward; try_again: after a wrong answer the environment says so and the policy answers again (a right answer at turn t earns discount^(t-1)); tool_use: the policy may call a calculator (<calc>expression</calc>) or Python in the code sandbox (<python>code</python>) and reads the output before it answers; or your own, \"module:Class\" / \"file.py:Class\" (made as Class(reward, **env.options) for each episode)")
    max_turns: int = Field(3, ge=1, description="policy turns an episode may take, each of at most rollout.max_new_tokens tokens")
    options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the environment, e.g. {discount: 0.5, feedback: 'Wrong. Try again.'} (try_again), {tools: [calc]} (tool_use)")
