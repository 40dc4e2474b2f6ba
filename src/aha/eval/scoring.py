"""What counts as a right answer in held-out evaluation: `eval.scorer`.

- `reward` (the default): the run's own composed reward (the `reward:` list); a sample is
  right (1.0) when the total is at least `eval.correct_threshold`, else wrong (0.0).
- `reward.<name>`: one component of that reward, unweighted, against the same threshold
  (`reward.<name>/<key>` for one part of a dict-valued reward).
- `module:function`, `file.py:function` or a built-in name (`numeric_answer`): that
  function's value is the sample's score, as it returns it (accuracy is their mean).

A scorer that cannot score a sample (it raises, or gives None, NaN or something that is not
a number) stops the evaluation with a ScorerError that names `eval.scorer` and the sample:
an accuracy over fewer samples, or with the failures counted as wrong, would read as a
real number and be wrong.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from pathlib import Path
from typing import Callable

from aha.config import Config
from aha.prompts import prompt_text
from aha.rewards.calls import TOKENS, as_number, takes_tokens
from aha.rewards.compose import CompositeReward, build_reward
from aha.rewards.functions import SHORT_NAMES, RewardError, resolve_function
from aha.rewards.mixture import build_mixture_reward

REWARD = "reward"
SLACK = 1e-6  # a total is a float32 sum of weighted parts: 0.4 + 0.6 may land a hair under 1.0


class ScorerError(RewardError):
    """eval.scorer could not score a held-out sample; the message names the sample."""


def _sample_label(sample: dict) -> str:
    prompt = " ".join(prompt_text(sample.get("prompt", "")).split())
    return f"{sample.get('id', '?')} ({prompt[:60] + '...' if len(prompt) > 60 else prompt!r})"


def _as_number(value) -> float | None:
    """value as a float, or None when it is not a number (None, a string, a dict, ...)."""
    try:
        return as_number(value)
    except (TypeError, ValueError, OverflowError):
        return None


class FunctionScorer:
    """A function's own value per sample, as `aha.rewards:numeric_answer` always was."""

    def __init__(self, name: str, fn: Callable[[str, dict], float]):
        self.name, self.fn = name, fn
        self.takes_tokens = takes_tokens(fn)
        self.key = name  # a sample cache's meta: the name, as before 'reward' existed
        self.describe = name

    def score(self, completions: list[str], samples: list[dict],
              completion_tokens: list[int] | None = None) -> list[float]:
        scores = []
        tokens = [None] * len(completions) if completion_tokens is None else completion_tokens
        for completion, sample, n in zip(completions, samples, tokens):
            try:
                value = self.fn(completion, sample, **({TOKENS: n} if self.takes_tokens and n is not None else {}))
            except Exception as err:  # noqa: BLE001 - any failure is reported the same way
                raise self.error(sample, f"{type(err).__name__}: {err}") from err
            number = _as_number(value)
            if number is None or not math.isfinite(number):
                raise self.error(sample, f"returned {value!r}, not a finite number")
            scores.append(number)
        return scores

    def error(self, sample: dict, reason: str) -> ScorerError:
        return ScorerError(f"eval.scorer {self.name!r} cannot score held-out sample {_sample_label(sample)}: {reason}. "
                           "Held-out accuracy is not computed over fewer samples: fix the function, or set eval.scorer "
                           "('reward' scores with the run's own reward)")

    def close(self) -> None:
        pass


class RewardScorer:
    """The run's reward (or one component of it) against a threshold: 1.0 right, 0.0 wrong."""

    def __init__(self, name: str, reward: CompositeReward, part: str | None, threshold: float, fingerprint: str,
                 owner: CompositeReward | None = None):
        self.name, self.reward, self.part, self.threshold = name, reward, part, threshold
        self.owner = owner  # a reward built for this scorer alone, closed with it
        # what a score means: a cache scored under another reward or threshold is not mixed with it
        self.key = f"{name} >= {threshold:g} (reward {fingerprint})"
        self.describe = f"{'total reward' if part is None else f'reward {part!r}'} >= {threshold:g}"

    def score(self, completions: list[str], samples: list[dict],
              completion_tokens: list[int] | None = None) -> list[float]:
        """completion_tokens: the tokens generated for each completion, for the rewards that take them."""
        result = self.reward.score(completions, samples, completion_tokens)
        for i, failed in enumerate(result.failed.tolist()):
            if failed:
                tokens = None if completion_tokens is None else [completion_tokens[i]]
                raise self.error(samples[i], self._why(completions[i], samples[i], tokens))
        if self.part is None:
            values = result.total.tolist()
        else:
            parts = [v for k, v in result.components.items() if k == self.part or k.startswith(self.part + "/")]
            if not parts and completions:
                raise self._missing_key(result.components)
            values = [sum(float(p[i]) for p in parts) for i in range(len(completions))]
        scores = []
        for sample, value in zip(samples, values):
            if not math.isfinite(value):
                raise self.error(sample, f"the reward's value is {value}")
            scores.append(float(value >= self.threshold - SLACK))
        return scores

    def _missing_key(self, components: dict) -> ScorerError:
        """`reward.<name>/<key>` where the component's result has no such key: the key is wrong, not a sample."""
        name = self.reward.components[0].name
        key = self.part[len(name) + 1:]
        keys = sorted(k[len(name) + 1:] for k in components if k.startswith(name + "/"))
        if name in components:
            found = f"returned a number, not a dict with the key {key!r}; score it whole with eval.scorer=reward.{name}"
        else:
            found = f"returned no key {key!r} (the keys it returned: {', '.join(map(repr, keys)) or 'none'})"
        return ScorerError(f"eval.scorer {self.name!r}: reward {name!r} {found}. Fix eval.scorer (reward.{name}/<key>)")

    def _why(self, completion: str, sample: dict, tokens: list[int] | None = None) -> str:
        """The failure, found again on this one sample (the composite only logs it)."""
        for comp in self.reward.components_for(sample):  # a task mixture's: the sample's task's
            outcome = comp.evaluate([completion], [sample], tokens)[0]
            if outcome.error is not None:
                return f"reward {comp.name!r} failed: {outcome.error}"
            values = outcome.value.values() if isinstance(outcome.value, dict) else [outcome.value]
            if any(_as_number(v) is None for v in values):
                return f"reward {comp.name!r} returned {outcome.value!r}, not a number or dict of numbers"
            if any(not math.isfinite(_as_number(v)) for v in values):  # NaN/inf: a failed sample, like a raise
                return f"reward {comp.name!r} returned {outcome.value!r}, not a finite number"
        return "a reward component failed (not again on a second try: see the warning in the log)"

    def error(self, sample: dict, reason: str) -> ScorerError:
        return ScorerError(f"eval.scorer {self.name!r} cannot score held-out sample {_sample_label(sample)}: {reason}. "
                           "Held-out accuracy is not computed over fewer samples: fix the reward, or set eval.scorer "
                           "to a function (module:function) or one component (reward.<name>)")

    def close(self) -> None:
        if self.owner is not None:
            self.owner.close()


Scorer = FunctionScorer | RewardScorer


def _unwrapped(fn: Callable) -> Callable:
    while isinstance(fn, functools.partial):  # a reward with args from the config
        fn = fn.func
    return fn


def _returns_a_number(fn: Callable) -> bool:
    """True for a built-in reward (aha.rewards) declared to return a float (per sample, or a
    batch of them); a user function's result is known only when it runs."""
    fn = _unwrapped(fn)
    returns = getattr(fn, "__annotations__", {}).get("return")
    return getattr(fn, "__module__", "").startswith("aha.rewards") and returns in ("float", float, "list[float | None]")


def build_scorer(config: Config, reward: CompositeReward | None = None) -> Scorer:
    """The scorer `config.eval.scorer` names. `reward` is the run's composed reward when the
    caller has built it (training); else, when needed, it is built here from config.reward and
    the scorer owns it (close() stops its worker processes)."""
    name, base_dir = config.eval.scorer, config.base_dir
    if name != REWARD and not name.startswith(REWARD + "."):
        if ":" not in name and name not in SHORT_NAMES:
            raise RewardError(f"eval.scorer: {name!r} is neither 'reward', 'reward.<component>', a built-in reward "
                              f"name ({', '.join(sorted(SHORT_NAMES))}) nor 'module:function'")
        return FunctionScorer(name, resolve_function(name, key="eval.scorer", base_dir=base_dir))
    if not config.reward:
        raise RewardError(f"eval.scorer: {name!r} scores with the run's reward, and the config's reward list is empty; "
                          "name a function instead (eval.scorer: module:function)")
    owner = None
    if reward is None:
        reward = owner = (build_mixture_reward(config.task.mixture, base_dir, dtype=config.train.dtype)
                          if config.task.mixture else build_reward(config.reward, base_dir, dtype=config.train.dtype))
    specs = json.dumps([spec.model_dump(mode="json") for spec in config.reward])
    if config.task.mixture:  # what a score means is each task's own reward
        specs += json.dumps([[spec.model_dump(mode="json") for spec in e.reward] for e in config.task.mixture])
    fingerprint = hashlib.sha256(specs.encode()).hexdigest()[:12]
    part = name[len(REWARD) + 1:] if name != REWARD else None
    if part is not None:
        matches = [c for c in reward.components if part == c.name or part.startswith(c.name + "/")]
        if not matches:
            if owner is not None:
                owner.close()
            raise RewardError(f"eval.scorer: {name!r} names no component of the reward; its components: "
                              f"{', '.join(repr(c.name) for c in reward.components)}")
        component = matches[0]
        if part != component.name and _returns_a_number(component.fn):
            if owner is not None:
                owner.close()
            key, whole = part[len(component.name) + 1:], f"reward.{component.name}"
            raise RewardError(f"eval.scorer: {name!r} names the key {key!r} of reward {component.name!r}, but "
                              f"{_unwrapped(component.fn).__name__} returns a number, not a dict; "
                              f"score it with eval.scorer={whole}")
        reward = CompositeReward([component])  # only that component: another one failing is not its failure
    return RewardScorer(name, reward, part, config.eval.correct_threshold, fingerprint, owner)


def held_out_name(config: Config, task_name: str) -> str:
    """What the held-out problems are called: by task.name where the user gave one, else a
    JSONL task by its held-out file (never by its training file), a built-in task by its name."""
    if config.task.data is not None and config.task.eval_data and config.task.name is None:
        return Path(config.task.eval_data).stem
    return task_name
