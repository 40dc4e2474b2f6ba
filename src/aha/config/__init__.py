"""Typed run configuration: YAML file + dotted `key=value` overrides, with errors that name the key.
The sections are in aha.config.sections; Config puts them together and checks keys across them."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from aha.config.sections import (
    BUILT_IN_TASKS,
    AlgorithmConfig,
    CurriculumConfig,
    EnvConfig,
    EvalConfig,
    LoraConfig,
    MonitorConfig,
    PreferenceConfig,
    ProcessRewardConfig,
    RayConfig,
    RewardModelConfig,
    RewardSpec,
    RolloutConfig,
    SFTConfig,
    Strict,
    TaskConfig,
    TrackingConfig,
    TrainConfig,
)


class ConfigError(ValueError):
    """A config problem, with the file and key at fault in the message."""


class Config(Strict):
    method: Literal["rl", "sft", "dpo", "rm", "prm"] = Field(
        "rl", description="what a step trains: rl (online RL on sampled completions), sft (supervised on responses), "
                          "dpo (preference optimisation, sft/dpo sections), rm (a reward model on preference pairs, "
                          "rm section), prm (a process reward model on step-labelled solutions, prm section); the run "
                          "folder, checkpoints, held-out evaluation and report are the same for each")
    model: str = Field("smollm2-135m", description="smollm2-135m, tiny, or a local Hugging Face folder")
    output_dir: str = Field("runs/default", description="the run folder: config.yaml, metrics.jsonl, samples.jsonl, log.txt, checkpoints/, report.html")
    seed: int = Field(0, description="seeds the model's sampling, the prompt order and every other random choice of the run")
    task: TaskConfig = TaskConfig(name="arithmetic")
    reward: list[RewardSpec] = Field([RewardSpec(fn="aha.rewards:numeric_answer")], description="the reward: a list of components (fn or model each), summed, multiplied or gated into one total; a built-in task's own verifier when left out")
    rollout: RolloutConfig = RolloutConfig()
    train: TrainConfig = TrainConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    eval: EvalConfig = EvalConfig()
    monitor: MonitorConfig = MonitorConfig()
    tracking: TrackingConfig = TrackingConfig()
    lora: LoraConfig = LoraConfig()
    ray: RayConfig = RayConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    env: EnvConfig = EnvConfig()
    sft: SFTConfig = SFTConfig()
    dpo: PreferenceConfig = PreferenceConfig()
    rm: RewardModelConfig = RewardModelConfig()
    prm: ProcessRewardConfig = ProcessRewardConfig()
    # where relative paths (data files, reward .py files) are resolved from
    base_dir: str = Field(".", description="set to the config file's folder when loaded from a file")

    @model_validator(mode="after")
    def _task_reward(self) -> "Config":
        """A built-in task trains on its own verifier unless the config names a reward."""
        if "reward" not in self.model_fields_set and self.task.data is None and self.task.name in BUILT_IN_TASKS:
            self.reward = [RewardSpec(fn=BUILT_IN_TASKS[self.task.name])]
        return self

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        # caught here rather than at the first step, after minutes of loading and eval
        a, G = self.algorithm, self.rollout.group_size
        problems = []
        if a.advantage == "grpo" and a.advantage_scale == "std" and G < 2:
            problems.append("rollout.group_size must be >= 2 with algorithm.advantage_scale=std (a group's std needs two samples)")
        if a.advantage == "rloo" and G < 2:
            problems.append("rollout.group_size must be >= 2 with algorithm.advantage=rloo (the baseline is the other samples)")
        if a.policy_loss == "pg" and (a.epochs > 1 or a.mini_batches > 1):
            problems.append("algorithm.policy_loss=pg is on-policy only: use epochs=1 and mini_batches=1, or policy_loss=ppo")
        if a.tis_cap is not None and a.old_logprobs != "trainer":
            problems.append("algorithm.tis_cap needs algorithm.old_logprobs=trainer (the weight is pi_trainer / pi_engine)")
        if (a.ref_reset_every or a.ref_reset_kl) and a.kl_coef == 0:
            problems.append("algorithm.ref_reset_every / ref_reset_kl need algorithm.kl_coef > 0 (there is no reference model)")
        if a.replay and a.advantage == "gae":
            problems.append("algorithm.replay does not work with advantage=gae (stored advantages go stale with the critic)")
        if a.token_weighting == "ktae" and a.advantage not in ("grpo", "rloo", "remax"):
            problems.append("algorithm.token_weighting=ktae needs a sequence-level advantage (grpo, rloo or remax)")
        if a.overlong_buffer > self.rollout.max_new_tokens:
            problems.append(f"algorithm.overlong_buffer ({a.overlong_buffer}) exceeds rollout.max_new_tokens ({self.rollout.max_new_tokens})")
        if self.method == "dpo" and not self.dpo.data and not self.dpo.online:
            problems.append("method=dpo needs dpo.data (a JSONL file of {prompt, chosen, rejected}) or dpo.online=true")
        if self.method == "dpo" and self.dpo.loss == "orpo" and self.dpo.nll_coef:
            problems.append("dpo.nll_coef adds an NLL term that dpo.loss=orpo already has: set one of them")
        if self.method == "dpo" and self.dpo.loss == "kto" and (self.dpo.online or self.dpo.nll_coef or self.dpo.label_smoothing):
            problems.append("dpo.loss=kto trains offline on labelled completions: dpo.online, dpo.nll_coef and "
                            "dpo.label_smoothing are for the pair losses")
        if self.method == "dpo" and self.dpo.data and self.dpo.online:
            problems.append("dpo.data is not used with dpo.online=true (the pairs are sampled from the policy): drop one")
        if self.method == "rm" and not self.rm.data:
            problems.append("method=rm needs rm.data: a JSONL file of {prompt, chosen, rejected}")
        if self.method == "prm" and not self.prm.data:
            problems.append("method=prm needs prm.data: a JSONL file of {prompt, steps, labels}")
        if self.train.keep_best and self.method in ("rm", "prm"):
            problems.append(f"train.keep_best ranks checkpoints by held-out accuracy of sampled answers, which "
                            f"method={self.method} does not measure (it scores pairs or steps): drop it")
        if self.rollout.max_staleness and not (self.method == "rl" and self.ray.rollout_workers):
            problems.append("rollout.max_staleness > 0 (asynchronous RL) samples ahead on Ray rollout workers: "
                            "set ray.rollout_workers >= 1 (and method=rl)")
        if (self.curriculum.filter or self.curriculum.weighting != "uniform") and self.method != "rl":
            problems.append("curriculum.filter / curriculum.weighting choose prompts from RL groups' outcomes: method=rl only")
        if self.rollout.partial_rollouts and self.method != "rl":
            problems.append("rollout.partial_rollouts carries completions from one RL round to the next: method=rl only")
        for key in ("max_staleness", "partial_rollouts"):  # both train on tokens an older policy drew
            if getattr(self.rollout, key) and a.old_logprobs == "trainer" and a.tis_cap is None:
                problems.append(f"rollout.{key} with algorithm.old_logprobs=trainer needs algorithm.tis_cap: the "
                                "trainer's log-probs of the current policy would treat tokens an older one drew as "
                                "on-policy")
        intervened = [key for key, value in (("rollout.temperatures", self.rollout.temperatures),
                                             ("rollout.force_continue", self.rollout.force_continue)) if value]
        for key in intervened:
            for other, value in (("rollout.partial_rollouts", self.rollout.partial_rollouts),
                                 ("rollout.max_staleness", self.rollout.max_staleness), ("env.name", self.env.name)):
                if value:
                    problems.append(f"{key} does not work with {other} yet: set one of them")
        for key in intervened:
            if self.method != "rl":
                problems.append(f"{key} changes how RL samples its groups: method=rl only")
        if self.rollout.temperatures and len(self.rollout.temperatures) > G:
            problems.append(f"rollout.temperatures lists {len(self.rollout.temperatures)} temperatures for groups of "
                            f"rollout.group_size={G}: some would never be used")
        for key, value in (("algorithm.overlong_buffer", a.overlong_buffer), ("algorithm.length_coef", a.length_coef),
                           ("algorithm.length_adaptive", a.length_adaptive)):
            if self.rollout.force_continue and value:
                problems.append(f"{key} measures a completion against max_new_tokens, which rollout.force_continue "
                                "lets it pass: set one of them")
        if self.task.stream and self.task.data is None:
            problems.append("task.stream reads task.data from disk a row at a time: set task.data")
        if self.task.stream and (self.curriculum.filter or self.curriculum.weighting != "uniform"):
            problems.append("curriculum.filter / curriculum.weighting look at every prompt each step: "
                            "not with task.stream (the prompts stay on disk)")
        if self.env.name is not None:
            if self.method != "rl":
                problems.append("env.name plays multi-turn episodes for online RL: method=rl only")
            for key, value in (("rollout.partial_rollouts", self.rollout.partial_rollouts),
                               ("rollout.max_staleness", self.rollout.max_staleness),
                               ("algorithm.overlong_buffer", a.overlong_buffer), ("algorithm.length_coef", a.length_coef),
                               ("algorithm.length_adaptive", a.length_adaptive)):
                if value:
                    problems.append(f"{key} is not supported with multi-turn episodes (env.name): set it to 0")
        if self.ray.reward_workers and not any(spec.workers for spec in [*self.reward, *self.monitor.gold]):
            problems.append("ray.reward_workers runs reward pools on Ray: give the slow rewards workers: N (>= 1)")
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _parse_scalar(text: str) -> Any:
    """A CLI value is read as YAML, so `steps=10` is an int and `name=null` is None."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(raw: dict, dotted: str) -> None:
    """Apply one `a.b.c=value` override to a nested dict in place."""
    if "=" not in dotted:
        raise ConfigError(f"override {dotted!r} is not of the form key=value")
    key, value = dotted.split("=", 1)
    parts = key.strip().split(".")
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"override {dotted!r}: {'.'.join(parts[: i + 1])} is not a section")
        node = child
    node[parts[-1]] = _parse_scalar(value)


def sections() -> list[tuple[str, type[BaseModel]]]:
    """(key, model) of each section of Config, in the schema's order."""
    return [(name, field.annotation) for name, field in Config.model_fields.items()
            if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)]


# keys as other frameworks (TRL, verl) or the issue tracker name them -> aha's
OTHER_NAMES = {
    "keep_last": "train.keep_checkpoints", "save_total_limit": "train.keep_checkpoints",
    "num_generations": "rollout.group_size", "learning_rate": "train.lr", "max_steps": "train.steps",
    "max_completion_length": "rollout.max_new_tokens", "per_device_train_batch_size": "train.micro_batch_size",
    "epsilon": "algorithm.clip_low", "epsilon_high": "algorithm.clip_high",
}


def suggestion(location: tuple) -> str:
    """' (did you mean ...?)' for an unknown key at `location` (pydantic's loc), or ''."""
    model: type[BaseModel] = Config
    path = []
    for part in location[:-1]:
        if isinstance(part, int):  # an item of a list of reward components
            path.append(str(part))
            continue
        field = model.model_fields.get(part)
        if field is None:
            return ""
        inner = field.annotation
        args = typing.get_args(inner)
        inner = args[0] if typing.get_origin(inner) is list and args else inner
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return ""
        model, path = inner, path + [str(part)]
    leaf = str(location[-1])
    # the same key in another section first (train.group_size: rollout.group_size), then a close spelling here
    elsewhere = [f"{name}.{leaf}" for name, section in sections() if leaf in section.model_fields]
    if model is Config and leaf in RewardSpec.model_fields:
        elsewhere.append(f"reward: [{{{leaf}: ...}}]")
    if elsewhere:
        return f" (did you mean {elsewhere[0]}?)"
    if leaf in OTHER_NAMES:  # another framework's name for one of ours
        return f" (did you mean {OTHER_NAMES[leaf]}?)"
    close = difflib.get_close_matches(leaf, list(model.model_fields), n=1, cutoff=0.6 if len(leaf) > 3 else 0.8)
    return f" (did you mean {'.'.join(path + close)}?)" if close else ""


def _describe(err: ValidationError, source: str) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        if not key:  # a check across keys: its message names them
            lines.append(f"config in {source}: {e['msg'].removeprefix('Value error, ')}")
        elif e["type"] == "extra_forbidden":
            lines.append(f"unknown config key '{key}' in {source}{suggestion(e['loc'])}")
        else:
            lines.append(f"config key '{key}' in {source}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def from_dict(raw: dict, source: str = "<config>") -> Config:
    try:
        return Config.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_describe(err, source)) from None


def read_mapping(path: Path) -> dict:
    """A YAML file's top-level mapping of config keys, or a ConfigError naming the file."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of config keys")
    return raw


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """Read a YAML config (or start from defaults when path is None) and apply overrides."""
    raw: dict = {}
    source = "command-line overrides"
    if path is not None:
        path = Path(path)
        source = str(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        raw = read_mapping(path)
        raw.setdefault("base_dir", str(path.parent))
    for item in overrides:
        apply_override(raw, item)
    return from_dict(raw, source)


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
