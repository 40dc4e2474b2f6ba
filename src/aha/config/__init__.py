"""Typed run configuration: YAML file + dotted `key=value` overrides, with errors that name the key.
The sections are in aha.config.sections; Config puts them together and checks keys across them."""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, model_validator

from aha.config.algorithm import AlgorithmConfig
from aha.config.checks import config_problems
from aha.config.diagnosis import DiagnosisConfig
from aha.config.distributed import DistributedConfig, distributed_problems
from aha.config.likelihood import LikelihoodRewardConfig, likelihood_problems
from aha.config.method_sections import (
    PreferenceConfig,
    ProcessRewardConfig,
    RewardModelConfig,
    RFTConfig,
    SFTConfig,
)
from aha.config.mixture import TaskSection, fill_mixture_rewards, mixture_problems
from aha.config.referee import RefereeConfig, referee_problems
from aha.config.run_sections import EvalConfig, LoraConfig, MonitorConfig, RayConfig, TrackingConfig
from aha.config.sections import (
    BUILT_IN_TASKS,
    CurriculumConfig,
    EnvConfig,
    RewardSpec,
    RolloutConfig,
    Strict,
    TaskConfig,  # noqa: F401 - re-exported: tasks/ type a task's knobs with it
    TrainConfig,
)


class ConfigError(ValueError):
    """A config problem, with the file and key at fault in the message."""


class Config(Strict):
    method: Literal["rl", "sft", "dpo", "rm", "prm", "rft"] = Field(
        "rl", description="what a step trains: rl (online RL on sampled completions), sft (supervised on responses), "
                          "dpo (preference optimisation, sft/dpo sections), rm (a reward model on preference pairs, "
                          "rm section), prm (a process reward model on step-labelled solutions, prm section), "
                          "rft (expert iteration: supervised steps on the policy's own samples that the reward "
                          "passes, rft section); the run "
                          "folder, checkpoints, held-out evaluation and report are the same for each")
    model: str = Field("smollm2-135m", description="smollm2-135m, tiny, a local Hugging Face folder, or a "
                       "Hugging Face Hub id owner/name[@revision] (a branch, tag or commit; read from the Hub client's "
                       "cache, what it lacks downloaded when online; HF_HUB_OFFLINE=1: the cache alone)")
    output_dir: str = Field("runs/default", description="the run folder: config.yaml, metrics.jsonl, samples.jsonl, "
                                                        "log.txt, checkpoints/, report.html")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="where the models run: cuda (one GPU a "
            "process; NCCL between learner ranks), cpu (gloo), or auto: CUDA where torch sees a GPU, else the CPU")
    seed: int = Field(0, description="seeds the model's sampling, the prompt order and every other random choice of "
                                     "the run")
    task: TaskSection = TaskSection(name="arithmetic")
    reward: list[RewardSpec] = Field([RewardSpec(fn="aha.rewards:numeric_answer")], description="the reward: a list of "
            "components (fn or model each), summed, multiplied or gated into one total; a built-in task's own verifier "
            "when left out")
    rollout: RolloutConfig = RolloutConfig()
    train: TrainConfig = TrainConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    eval: EvalConfig = EvalConfig()
    monitor: MonitorConfig = MonitorConfig()
    diagnosis: DiagnosisConfig = DiagnosisConfig()
    tracking: TrackingConfig = TrackingConfig()
    lora: LoraConfig = LoraConfig()
    ray: RayConfig = RayConfig()
    distributed: DistributedConfig = DistributedConfig()
    curriculum: CurriculumConfig = CurriculumConfig()
    env: EnvConfig = EnvConfig()
    referee: RefereeConfig = RefereeConfig()
    likelihood_reward: LikelihoodRewardConfig = LikelihoodRewardConfig()
    sft: SFTConfig = SFTConfig()
    dpo: PreferenceConfig = PreferenceConfig()
    rm: RewardModelConfig = RewardModelConfig()
    prm: ProcessRewardConfig = ProcessRewardConfig()
    rft: RFTConfig = RFTConfig()
    # where relative paths (data files, reward .py files) are resolved from
    base_dir: str = Field(".", description="set to the config file's folder when loaded from a file")
    # the file and overrides it was loaded from (not a setting: messages say how to run it again)
    _origin: tuple[str | None, tuple[str, ...]] = PrivateAttr((None, ()))

    @property
    def origin(self) -> tuple[str | None, tuple[str, ...]]:
        return self._origin

    @model_validator(mode="after")
    def _task_reward(self) -> "Config":
        """A built-in task trains on its own verifier unless the config names a reward."""
        if "reward" not in self.model_fields_set and self.task.data is None and self.task.name in BUILT_IN_TASKS:
            self.reward = [RewardSpec(fn=BUILT_IN_TASKS[self.task.name])]
            self.model_fields_set.discard("reward")  # derived, not given: a Config given to aha.train derives it anew
        fill_mixture_rewards(self)  # each task of task.mixture scores with its own list
        return self

    @model_validator(mode="after")
    def _held_out_follows_the_data(self) -> "Config":
        """dpo or sft on the user's own data, with no task named: greedy accuracy on the default task
        would measure something unrelated to the data, so held-out evaluations measure only the
        method's own held-out data. Written into the config, so a resumed run decides alike."""
        own_data = own_training_data(self) in ("dpo.data", "sft.data")
        if own_data and "task" not in self.model_fields_set and "greedy" not in self.eval.model_fields_set:
            self.eval.greedy = False
            self.eval.model_fields_set.discard("greedy")  # derived, as the reward above
        return self

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        # the cross-checks between sections (config/checks.py), then the referee's (config/referee.py)
        problems = (config_problems(self) + referee_problems(self) + mixture_problems(self)
                    + likelihood_problems(self) + distributed_problems(self))
        if problems:
            raise ValueError("; ".join(problems))
        return self


# the methods whose section of their own name may hold the data they train on (<method>.data)
METHODS_WITH_DATA = ("dpo", "sft", "rm", "prm")


def own_training_data(config: Config) -> str | None:
    """The key of the file the method trains on when that is not the task (dpo.data, sft.data,
    rm.data, prm.data), else None: the task's prompts are what it trains on."""
    if config.method in METHODS_WITH_DATA and getattr(config, config.method).data:
        return f"{config.method}.data"
    return None


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
        # a weight at the top is a reward component's far more often than referee.weight
        elsewhere.insert(0 if leaf == "weight" else len(elsewhere), f"reward: [{{{leaf}: ...}}]")
    if elsewhere:
        return f" (did you mean {elsewhere[0]}?)"
    if leaf in OTHER_NAMES:  # another framework's name for one of ours
        return f" (did you mean {OTHER_NAMES[leaf]}?)"
    close = difflib.get_close_matches(leaf, list(model.model_fields), n=1, cutoff=0.6 if len(leaf) > 3 else 0.8)
    return f" (did you mean {'.'.join(path + close)}?)" if close else ""


def _blame(location: tuple, source: str, overrides: typing.Sequence[str], unknown: bool = False) -> str:
    """Where the value at location came from: the last command-line override that set it or a
    section above it (or, for an unknown key, made it: trian.steps=3 makes trian), else the file
    (source). An override of a key within location (a section's check) set only part of it."""
    loc = [str(p) for p in location]
    for item in reversed(overrides):
        parts = item.split("=", 1)[0].strip().split(".")
        if loc[: len(parts)] == parts or (unknown and parts[: len(loc)] == loc):
            return f"the override {item!r}"
    return source


def _describe(err: ValidationError, source: str, overrides: typing.Sequence[str] = ()) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        where = _blame(e["loc"], source, overrides, e["type"] == "extra_forbidden")
        if not key:  # a check across keys: its message names them
            lines.append(f"config in {source}: {e['msg'].removeprefix('Value error, ')}")
        elif e["type"] == "extra_forbidden":
            lines.append(f"unknown config key '{key}' in {where}{suggestion(e['loc'])}")
        else:
            lines.append(f"config key '{key}' in {where}: {e['msg']} (got {e.get('input')!r})")
    return "\n".join(lines)


def from_dict(raw: dict, source: str = "<config>", overrides: typing.Sequence[str] = ()) -> Config:
    """source: the file the values came from, overrides: the dotted key=value items applied over it
    (an error in a key one of them set names that override, not the file)."""
    try:
        return Config.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_describe(err, source, overrides)) from None


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
        raw = read_config_file(path)
    for item in overrides:
        apply_override(raw, item)
    config = from_dict(raw, source, overrides)
    config._origin = (None if path is None else str(path), tuple(overrides))
    return config


def read_config_file(path: Path) -> dict:
    """A config file's raw mapping, with base_dir (where its relative paths start) set to its folder
    unless it names one."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    raw = read_mapping(path)
    raw.setdefault("base_dir", str(path.parent))
    return raw


def dump_config(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
