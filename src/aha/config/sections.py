"""The sections of a run's config, one pydantic model each (aha.config puts them together)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# the default prompt of a retry shown its answer (rft.hint, algorithm.guidance_hint)
ANSWER_HINT = "{prompt}\n(The correct answer is {answer}.)"


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

    name: str | None = Field(None, description=f"built-in task: {', '.join(BUILT_IN_TASKS)}; with task.data, the name "
                                               "reports give your task (default: the data file's name)")
    data: str | None = Field(None, description="training data: .jsonl (one {prompt, answer, ...} per line), .json (an "
                                               "array of them), .parquet, .csv / .tsv (a header row), or a folder "
                                               "written by datasets' save_to_disk")
    eval_data: str | None = Field(None, description="held-out data, same formats; may be left out when task.data is a "
                                                    "datasets folder with an eval_split")
    eval_fraction: float | None = Field(None, gt=0, lt=1, description="instead of task.eval_data: hold out this "
            "share of task.data's rows (shuffled by task.seed, not the run's seed: every run holds out the same rows)")
    prompt_field: str = Field("prompt", description="the field of your rows that holds the prompt (a string or a list "
                                                    "of chat messages)")
    answer_field: str = Field("answer", description="the field of your rows that holds the reference answer")
    prompt_template: str | None = Field(None, description="the prompt written from the row's fields, e.g. 'Question: "
                                                          "{question}\nChoices: {choices}' (replaces prompt_field; {{ "
                                                          "}} for literal braces)")
    stream: bool = Field(False, description="keep task.data and task.eval_data on disk (files larger than memory): one "
                                            "pass checks every row and keeps only where it is and its id; a sample is "
                                            "read back when drawn. JSON lines and CSV/TSV are re-read at the row's "
                                            "byte offset, datasets folders are memory-mapped, Parquet is converted "
                                            "once by datasets to a memory-mapped Arrow file in its cache; not a .json "
                                            "array")
    split: str = Field("train", description="the split task.data names in a datasets folder with several splits")
    eval_split: str = Field("test", description="the split task.eval_data (or, without it, task.data) names in a "
                                                "datasets folder with several splits")
    system_prompt: str | None = Field(None, description="system message; None keeps the model's default")
    few_shot: list[dict[str, Any]] = Field(default_factory=list, description="[{prompt, answer}] chat turns before "
            "each question")
    # arithmetic knobs (ignored by JSONL tasks)
    operators: list[Literal["+", "-", "*"]] = Field(["*"], description="arithmetic: the operators its problems use")
    a_min: int = Field(2, description="arithmetic: the smallest first operand")
    a_max: int = Field(30, description="arithmetic: the largest first operand")
    b_min: int = Field(2, description="arithmetic: the smallest second operand")
    b_max: int = Field(9, description="arithmetic: the largest second operand")
    num_eval: int = Field(200, ge=1, description="held-out problems; never overlap training")
    num_train: int = Field(2000, ge=1, description="training problems of a procedural task (arithmetic trains on every "
                                                   "other problem of its range)")
    difficulty: int = Field(1, ge=1, description="a procedural task's difficulty: more digits, numbers, nodes, words "
                                                 "or terms")
    eval_difficulty: int | None = Field(None, ge=1, description="the held-out problems' difficulty (default: "
                                                                "task.difficulty); higher is an out-of-distribution "
                                                                "split")
    template: str = Field("What is {a} {op} {b}?", description="question text; {a} {op} {b}")
    seed: int = Field(0, description="a built-in task's split into training and held-out problems (and the problems a "
                                     "procedural task draws), and task.eval_fraction's")

    @model_validator(mode="after")
    def _one_held_out_source(self) -> "TaskConfig":
        if self.eval_fraction is not None and (self.data is None or self.eval_data is not None):
            raise ValueError("task.eval_fraction holds out a share of task.data's rows: give it with task.data, "
                             "and without task.eval_data")
        return self


class OnlineRMConfig(Strict):
    """A reward model that keeps learning during RL (Cooper): every `every` steps, Bradley-Terry
    steps on pairs from the step's groups, a completion the verifier marks right against one it
    marks wrong. Set on a reward component with `model:` as its `online:` key."""

    verifier: str = Field(..., description="the rule verifier that labels the samples: the name of another component "
                                           "of reward or of monitor.gold (e.g. numeric_answer)")
    threshold: float = Field(1.0, description="a verifier score >= this is right, below it wrong")
    every: int = Field(1, ge=1, description="update the reward model every this many RL steps, on that step's groups")
    steps: int = Field(1, ge=1, description="optimizer steps an update takes, each over all its pairs")
    pairs_per_update: int = Field(8, ge=1, description="at most this many pairs an update: per group, its right "
                                                       "completion the reward model scores lowest against its wrong "
                                                       "one it scores highest; the worst-ordered pairs first")
    lr: float = Field(1.0e-5, gt=0, description="the reward model's learning rate (AdamW with train.betas, "
                                                "weight_decay and max_grad_norm)")


def component_name(spec: RewardSpec) -> str:
    """The name a reward component goes by in metrics, samples and other keys (name, else the
    function's name, else reward_model), as rewards.build_reward names it."""
    return spec.name or (spec.fn.rpartition(":")[2] if spec.fn else "reward_model")


class RewardSpec(Strict):
    """One reward: a function (`fn`) or a trained reward model (`model`), exactly one of them."""

    fn: str | None = Field(None, description='"module:function" or "file.py:function"; fn(completion, sample) -> float '
                                             '| dict')
    model: str | None = Field(None, description="a reward model trained with method: rm: its run folder (the newest "
                                                "checkpoint), a checkpoint folder, or the Hub id "
                                                "(owner/name[@revision]) of one uploaded to the Hugging Face Hub; "
                                                "scores prompt + completion in batches (args: batch_size, dtype, "
                                                "device); or a process reward model (method: prm), scoring each "
                                                "step of the completion and aggregating them (args.aggregate: min, "
                                                "sum or mean)")
    weight: float = Field(1.0, description="this component's weight in the total (combine=sum)")
    name: str | None = Field(None, description="the component's name in metrics (reward/<name>) and samples; default: "
                                               "the function's or model's")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments passed to fn, e.g. {rel_tol: "
            "0.01}")
    combine: Literal["sum", "product", "gate"] = Field("sum", description="sum: add weight * value; product: multiply "
            "the total; gate: zero the total unless value >= gate_min")
    gate_min: float = Field(1.0, description="combine=gate: the value a gate needs to pass")
    clip_min: float | None = Field(None, description="floor on this reward's value before weighting")
    clip_max: float | None = Field(None, description="cap on this reward's value before weighting (a learned reward: "
                                                     "exploiting it stops paying)")
    workers: int = Field(0, ge=0, description="0: call in this process; N: a pool of N worker processes (slow rewards: "
                                              "code, remote checks)")
    timeout_s: float = Field(60.0, gt=0, description="workers >= 1: a call past this many seconds is killed and scores "
                                                     "as failed")
    online: OnlineRMConfig | None = Field(None, description="a reward model (model:) that keeps learning during RL "
                                                            "from a verifier's labels: see online.* below")

    @model_validator(mode="after")
    def _clip_order(self):
        if (self.fn is None) == (self.model is None):
            raise ValueError("a reward needs exactly one of fn (a function) and model (a trained reward model)")
        if self.online is not None and self.model is None:
            raise ValueError(f"online: only a reward model (model: a method: rm run) learns during RL; {self.fn} is a "
                             "fixed function")
        if self.clip_min is not None and self.clip_max is not None and self.clip_min > self.clip_max:
            raise ValueError(f"clip_min ({self.clip_min}) is above clip_max ({self.clip_max})")
        return self


class RolloutConfig(Strict):
    """How a step samples: prompts and group size, token budget, temperature, the engine,
    asynchronous and partial rollouts, and the rollout interventions."""

    prompts_per_step: int = Field(8, ge=1, description="distinct prompts sampled per generation round")
    group_size: int = Field(8, ge=1, description="completions per prompt (G)")
    max_new_tokens: int = Field(64, ge=1, description="new tokens a completion may have (a turn, in a multi-turn "
                                                      "episode); one cut there is truncated")
    temperature: float = Field(1.0, gt=0, description="sampling temperature; the learner's log-probs are taken at the "
                                                      "same one")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling: keep the smallest set of tokens whose "
                                                      "probability reaches top_p")
    batch_size: int = Field(64, ge=1, description="sequences per generate() call (memory bound)")
    engine: Literal["auto", "vllm", "hf"] = Field("auto", description="the sampling engine: vllm (vLLM in its own "
            "environment, `make vllm`; the policy's weights handed over after each step), hf (sampling on the policy's "
            "own modules, a lean decoding step for Llama models); auto: vllm for budgets over 64 new tokens of models "
            "without the lean step, where an environment with it is found and starts, else hf")
    max_staleness: int = Field(0, ge=0, description="asynchronous RL: 0 samples each step on the newest weights; k >= "
                                                    "1 samples the next k steps' first rounds ahead, on the rollout "
                                                    "workers while the learner updates, so a sample may be up to k "
                                                    "policy versions old (the ratio's denominator is the engine's "
                                                    "log-probs of the policy that drew it; add old_logprobs=trainer "
                                                    "and tis_cap to correct toward the current one). With "
                                                    "partial_rollouts a continued completion's first tokens can be "
                                                    "older. Needs ray.rollout_workers")
    partial_rollouts: int = Field(0, ge=0, description="partial rollouts (APRIL): 0 samples every group of a round to "
                                                       "the end; n >= 1 launches n groups beyond prompts_per_step, "
                                                       "stops sampling once prompts_per_step groups are complete, and "
                                                       "carries the completions still going (tokens and sampling "
                                                       "log-probs so far) into the next round, where they continue "
                                                       "first on the newer weights (any engine, asynchronous RL "
                                                       "included). Let rollout.batch_size hold the whole round, "
                                                       "(prompts_per_step + n) x group_size, for the HF engine to stop "
                                                       "it early")
    temperatures: list[Annotated[float, Field(gt=0)]] | None = Field(None, min_length=1,
                                                                     description="multi-temperature sampling within a "
                                                                             "group: row j of each group is drawn at "
                                                                             "temperatures[j mod K] (e.g. [0.6, 1.0, "
                                                                             "1.4]), its log-probs in the sampler and "
                                                                             "the learner at its own; none: every row "
                                                                             "at rollout.temperature")
    force_continue: int = Field(0, ge=0, description="forced continuation after an early stop (s1's budget forcing): a "
                                                     "completion that stops on its stop token is made to go on up to "
                                                     "this many times, its stop token replaced by "
                                                     "rollout.continue_text, each time for up to max_new_tokens more "
                                                     "tokens; the inserted text is read by the learner but never "
                                                     "trained")
    continue_text: str = Field("Wait", min_length=1, description="what replaces a forced completion's stop token "
            "(rollout.force_continue)")
    vllm_python: str | None = Field(None, description="the Python of an environment with vLLM; unset: "
                                                      "$AHA_VLLM_PYTHON, else .venv-vllm/bin/python beside aha's "
                                                      "environment")


class TrainConfig(Strict):
    """Optimisation and bookkeeping; the RL maths lives in `algorithm`."""

    steps: int = Field(100, ge=0, description="RL steps: one rollout batch each")
    lr: float = Field(1e-6, ge=0, description="AdamW learning rate; 1e-6 (TRL's GRPO default) suits models of 1B and "
                                              "up, the recipes use 3e-5 for the 135M model")
    weight_decay: float = Field(0.0, ge=0, description="AdamW's decoupled weight decay")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW's beta1 and beta2")
    micro_batch_size: int = Field(16, ge=1, description="sequences per forward/backward (memory only: gradients "
                                                        "accumulate, results do not change)")
    max_grad_norm: float = Field(1.0, gt=0, description="clip the gradient's global norm to this before each optimizer "
                                                        "step")
    share_prompt: bool = Field(True, description="run each group's prompt once in the learner (same gradients, less "
                                                 "compute)")
    dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="compute dtype; auto = bf16 autocast "
            "only where the CPU has native bf16")
    checkpoint_every: int = Field(50, ge=0, description="write a checkpoint every N steps (and always at the last step "
                                                        "and on Ctrl-C); 0: only then")
    keep_checkpoints: int = Field(2, ge=1, description="the newest checkpoints kept; older ones are deleted once a "
                                                       "newer one is whole")
    keep_best: bool = Field(False, description="also keep the checkpoint with the best held-out accuracy (of those "
                                               "evaluated at a checkpoint's step: make eval.every a multiple of "
                                               "checkpoint_every); ties keep the later one")
    resume: bool = Field(True, description="continue from the run folder's newest checkpoint, if it has one; false "
                                           "starts again from step 0 (the folder's metrics and samples are written "
                                           "anew)")
    log_samples: int = Field(4, ge=0, description="completions per step written to samples.jsonl")
    report: bool = Field(True, description="write runs/<name>/report.html (a plot of every logged metric) when the run "
                                           "ends; `aha report RUN` rebuilds it at any time")
    max_reward_failure_rate: float = Field(0.5, ge=0, le=1, description="stop the run, before its update, when a "
            "step's reward failed (raised, timed out, returned NaN/inf or a non-number) on more than this share of its "
            "samples; 1.0 never stops")
    max_idle_steps: int | None = Field(None, ge=1, description="stop the run after this many consecutive steps with "
                                                               "nothing to train on (no sample with a non-zero "
                                                               "advantage: train/nothing_to_train); none: never")
    allow_config_change: bool = Field(False, description="resume a run whose config.yaml differs in keys that change "
                                                         "what is trained (not model); the change and its step go to "
                                                         "config_history.jsonl")
    memory_check: Literal["refuse", "warn", "ignore"] = Field("refuse", description="before the model loads, the "
            "run's peak memory is forecast (`aha plan`): refuse stops a run forecast over the machine's whole memory "
            "(naming the setting to lower) and warns over the memory free now; warn only warns; ignore: no forecast")


class CurriculumConfig(Strict):
    """Which prompts an RL run spends rollouts on (tasks/curriculum.py, tasks/schedule.py)."""

    filter: bool = Field(False, description="online difficulty filtering: a prompt whose latest filter_after groups "
                                            "were each all right or all wrong (no advantage) sits out its next "
                                            "retest_after turns, then is tried again")
    retest_after: int = Field(2, ge=1, description="turns a prompt set aside by filter sits out: the next times "
                                                   "epoch-order sampling comes to it (one an epoch), or with a "
                                                   "weighting the next draws (steps)")
    filter_after: int = Field(1, ge=1, description="with filter: groups in a row without variance before a prompt is "
                                                   "set aside (2: only after a second look); counted afresh after "
                                                   "each sitting-out")
    weighting: Literal["uniform", "variance", "target"] = Field("uniform", description="uniform: each epoch a fresh "
            "permutation; variance: prompts drawn in proportion to p (1 - p) + floor; target: in proportion to "
            "exp(-(p - target_p)^2 / (2 target_width^2)) + floor; p is the prompt's estimated pass rate (prior)")
    floor: float = Field(0.05, gt=0, description="with a weighting: the weight every prompt keeps, so none is starved")
    target_p: float | None = Field(None, gt=0, lt=1, description="with weighting target: the pass rate aimed at "
                                                                 "(small: the prompts still failed, as RCS; 0.5: "
                                                                 "intermediate difficulty, as GPS)")
    target_width: float = Field(0.15, gt=0, description="with weighting target: the kernel's width in pass rate (a "
                                                        "prompt this far from target_p weighs e^-1/2 of one on it)")
    prior: Literal["flat", "pool"] = Field("flat", description="a prompt's pass rate p = (right + 2 m) / (tried + 2) "
            "over its samples so far; flat: m = 1/2; pool: m = the pass rate of all samples of the prompts drawn "
            "from, so an untried prompt is estimated from the others")
    difficulty_max: int | None = Field(None, ge=1, description="a procedural task's difficulty schedule: start at "
            "task.difficulty and draw from the next level's problems when the training accuracy over the level's "
            "last difficulty_window steps reaches difficulty_threshold, up to this level; null: no schedule")
    difficulty_threshold: float = Field(0.8, gt=0, le=1, description="with difficulty_max: the rolling training "
                                                                      "accuracy (right / sampled) that raises the "
                                                                      "level")
    difficulty_window: int = Field(5, ge=1, description="with difficulty_max: the steps at the current level the "
                                                        "rolling accuracy is over (a new level starts an empty window)")


class EnvConfig(Strict):
    """Multi-turn episodes (aha.envs): the policy and an environment take turns, the environment's
    rewards are trained on."""

    name: str | None = Field(None, description="none: single-turn completions scored by the reward; try_again: after a "
                                               "wrong answer the environment says so and the policy answers again (a "
                                               "right answer at turn t earns discount^(t-1)); tool_use: the policy may "
                                               "call a calculator (<calc>expression</calc>) or Python in the code "
                                               "sandbox (<python>code</python>) or your own Python functions "
                                               "(env.options.tools) and reads the output before it "
                                               "answers; or your own, \"module:Class\" / \"file.py:Class\" (made as "
                                               "Class(reward, **env.options) for each episode)")
    max_turns: int = Field(3, ge=1, description="policy turns an episode may take, each of at most "
                                                "rollout.max_new_tokens tokens")
    options: dict[str, Any] = Field(default_factory=dict, description="keyword arguments of the environment, e.g. "
            "{discount: 0.5, feedback: 'Wrong. Try again.'} (try_again), {tools: [calc]} or "
            "{tools: {lookup: 'tools.py:lookup'}, timeout_s: 5} (tool_use: your functions, run in a worker process)")
