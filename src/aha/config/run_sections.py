"""The sections around a run: held-out evaluation, the hacking monitor, LoRA, Ray workers and
metrics trackers; aha.config puts them with the others."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from aha.config.sections import RewardSpec, Strict


class MonitorConfig(Strict):
    """The reward-hacking monitor (aha/training/monitor.py)."""

    gold: list[RewardSpec] = Field(default_factory=list, description="held-out gold reward, scored on every step's "
            "completions and never trained on")
    baseline_steps: int = Field(3, ge=1, description="steps averaged for each series' starting point")
    window: int = Field(5, ge=1, description="steps of moving average before comparing with the start")
    patience: int = Field(3, ge=1, description="consecutive steps a condition must hold to raise its flag")
    gap_threshold: float = Field(0.2, gt=0, description="flag gap: trained-reward gain minus gold gain above this (in "
                                                        "reward units)")
    gold_drop: float = Field(0.5, gt=0, le=1, description="flag gold_drop: trained reward up while gold fell below (1 "
                                                          "- this) of its start")
    repetition_ngram: int = Field(4, ge=1, description="word n-grams for the repetition measure")
    repetition_rise: float = Field(0.2, gt=0, description="flag repetition: repeated n-gram fraction up by this")
    length_factor: float = Field(2.0, gt=1, description="flag length: mean length above this times the start")
    format_components: list[str] = Field(default_factory=list, description="reward names that only check format")
    format_gain: float = Field(0.2, gt=0, description="flag format_only: format components up by this...")
    gold_gain_min: float = Field(0.05, description="...while gold gained less than this")


class EvalConfig(Strict):
    """Held-out evaluation: when it runs during training, on how much, and what counts as right."""

    greedy: bool = Field(True, description="held-out evaluations measure greedy accuracy on the task's held-out "
                                           "prompts (besides a method's own held-out metrics, e.g. DPO's preference "
                                           "accuracy); turned off for you when dpo or sft trains on its own data and "
                                           "the config names no task")
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
    rank_by: list[RewardSpec] = Field(default_factory=list, description="with aha eval --samples: rewards (a reward "
            "model, a judge, a verifier) that each score every sample; each adds a best-of-k and a weighted-voting "
            "curve named after it")
    temperatures: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list, description="with aha eval "
            "--samples N: draw N samples per problem at each of these temperatures (e.g. [0.6, 1.0, 1.4]) and report "
            "each temperature's curves beside the pooled ones (pass@k and maj@k over all N x K samples: temperature "
            "scaling); empty: N samples at rollout.temperature")
    search: Literal["none", "greedy_step", "beam"] = Field("none", description="aha eval only (or aha eval --search): "
            "step-level search judged by search_scorer, reported beside best-of-N at an equal number of generated "
            "tokens; greedy_step keeps the best of search_expand next steps, beam keeps search_width partial solutions")
    search_width: int | None = Field(None, ge=1, description="search=beam: partial solutions kept at each step "
                                                             "(default 4); greedy_step keeps 1")
    search_expand: int = Field(4, ge=1, description="search: candidate next steps sampled from each kept partial "
                                                    "solution")
    search_max_steps: int = Field(8, ge=1, description="search: steps taken one at a time; the last expansion runs "
                                                       "every candidate to its stop token or token budget")
    search_separator: str = Field("\n", min_length=1, description="search: a step ends at the first token whose text "
                                  "holds this (a PRM's prm.step_separator), at the stop token or at the token budget")
    search_scorer: RewardSpec | None = Field(None, description="search: the judge. A process reward model ({model: "
            "runs/prm}) scores every partial solution; any other reward ({fn: numeric_answer}, a reward model) scores "
            "finished answers only: those >= correct_threshold rank first, unfinished ones next, the rest last")

    @field_validator("temperatures")
    @classmethod
    def _several_distinct(cls, temperatures: list[float]) -> list[float]:
        """One temperature has nothing to pool, and a repeated one would be pooled with itself."""
        if len(temperatures) == 1:
            raise ValueError("eval.temperatures pools samples drawn at two or more temperatures; for one, set "
                             "rollout.temperature")
        twice = sorted({t for t in temperatures if temperatures.count(t) > 1})
        if twice:
            raise ValueError(f"eval.temperatures lists {', '.join(f'{t:g}' for t in twice)} more than once")
        return temperatures


class LoraConfig(Strict):
    """Low-rank adapters (peft) on the trained model instead of training every weight: the
    policy, or with method rm / prm the reward model's body (its heads train whole)."""

    rank: int = Field(0, ge=0, description="LoRA rank r of the policy's adapters; 0 trains every weight (no adapters)")
    alpha: float | None = Field(None, gt=0, description="the adapters' update is scaled by alpha / rank; default 2 x "
                                                        "rank")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout on the adapters' input")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="the Linear layers that get adapters, by name (q_proj, v_proj, ...); all-linear: "
                                  "every one but the LM head")


class RayConfig(Strict):
    """Sampling on Ray rollout workers (actors), and the learner ranks as Ray actors."""

    rollout_workers: int = Field(0, ge=0, description="0: sample in this process; N: N Ray actors, each with its own "
                                                      "engine (HF, or vLLM with rollout.engine=vllm) and copy of the "
                                                      "policy, sample a share of each step's prompts")
    address: str | None = Field(None, description="a running Ray cluster to join (e.g. ray://head:10001 or auto); "
                                                  "none: start a local one")
    object_store_mb: int = Field(1024, ge=80, description="a local cluster's object store (the policy's weights pass "
                                                          "through it once a step)")
    worker_threads: int = Field(1, ge=1, description="CPU threads (and Ray CPUs) of each rollout worker")
    runtime_env: dict[str, Any] | None = Field(None, description="Ray's runtime environment for the job's workers "
            "(pip, env_vars, working_dir, py_modules, ...), as ray.init takes it")
    ship_aha: bool = Field(False, description="add aha's own package to the runtime environment's py_modules, for "
                                              "cluster nodes where aha is not installed (its dependencies still need "
                                              "to be there, or in runtime_env.pip)")
    learner_workers: int = Field(0, ge=0, description="0 or 1: the learner in this process (or torchrun's, "
                                 "distributed.processes); N: N learner ranks as Ray actors on the cluster, each "
                                 "with worker_threads CPUs, rank 0 owning the run folder (aha train starts them)")
    reward_workers: bool = Field(False, description="run each reward's `workers: N` pool as N Ray actors (on the "
                                                    "cluster, deadlines and replacement as with local processes) "
                                                    "instead of local processes")


class TrackingConfig(Strict):
    """Where metrics go besides metrics.jsonl (always written): each sink is one key."""

    tensorboard: bool = Field(False, description="also write TensorBoard event files to <output_dir>/tensorboard")
    mlflow: bool = Field(False, description="also log to MLflow, by default in a local sqlite database "
                                            "<output_dir>/mlflow.db (or at tracking.mlflow_uri); a resume continues "
                                            "the same MLflow run")
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI; default: sqlite:///<output_dir>/mlflow.db "
                                                     "(MLflow 3 refuses a file store unless "
                                                     "MLFLOW_ALLOW_FILE_STORE=true)")
    mlflow_experiment: str = Field("aha", description="MLflow experiment name")
    wandb: bool = Field(False, description="also log to Weights & Biases, its run files in <output_dir>/wandb; a "
                                           "resume continues the same W&B run")
    wandb_project: str = Field("aha", description="W&B project name (the entity: WANDB_ENTITY or your default)")
    wandb_mode: Literal["offline", "online"] = Field("offline", description="offline: the run stays in "
                                                     "<output_dir>/wandb until `wandb sync <output_dir>/wandb/"
                                                     "offline-run-*` uploads it, so a run never waits on the "
                                                     "network; online: streamed to the W&B server as it runs "
                                                     "(after `wandb login`)")
    trackio: bool = Field(False, description="also log to trackio, in its local store (TRACKIO_DIR, by default "
                                             "~/.cache/huggingface/trackio; `trackio show` opens it); a resume "
                                             "continues the same trackio run")
    trackio_project: str = Field("aha", description="trackio project name")
