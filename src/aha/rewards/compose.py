"""Weighted composition of reward functions, with a per-component breakdown and error isolation."""

from __future__ import annotations

import copy
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from aha.config import RayConfig, RewardSpec
from aha.config.sections import component_name
from aha.rewards.calls import TOKENS, Outcome, SigintWatch, call_guarded, describe, score_parts, shown, takes_tokens
from aha.rewards.functions import Logged, RewardError, StepScores, bind_args, resolve_function, with_config_folder
from aha.rewards.pool import WorkerPool

if TYPE_CHECKING:  # annotations only: torch and Ray load where they are used
    import torch

    from aha.rewards.ray_pool import RayRewardPool

log = logging.getLogger(__name__)

RewardFn = Callable[[str, dict], "float | dict[str, float]"]


def reward_formula(parts: list[tuple[str, float, str, float]]) -> str:
    """How the total is made, as the composition computes it: (name, weight, combine,
    gate_min) per component -> '(1*correct + 0.2*format) * length_ok * [safe >= 1]'."""
    terms = " + ".join(f"{weight:g}*{name}" for name, weight, combine, _ in parts if combine == "sum")
    factors = [name if combine == "product" else f"[{name} >= {gate_min:g}]"
               for name, _, combine, gate_min in parts if combine != "sum"]
    if not factors:
        return terms
    return " * ".join(([f"({terms})" if " + " in terms else terms] if terms else ["0"]) + factors)


class RewardFailureError(RewardError):
    """A reward that failed on more of a step's samples than train.max_reward_failure_rate allows."""


FLOAT32_MAX = 3.4028234663852886e38  # torch.finfo(torch.float32).max: scores are kept in float32


@dataclass
class RewardResult:
    total: torch.Tensor  # (N,) weighted sum of components
    components: dict[str, torch.Tensor]  # name -> (N,) unweighted values
    failed: torch.Tensor  # (N,) bool: some component raised or gave NaN/inf on this sample
    # component name ("total": an overflow) -> samples it failed on
    failures: dict[str, int] = field(default_factory=dict)
    # per sample, (character offset where a step ends, its share of total) from components that
    # scored step by step (StepScores); None when none did. What total holds beyond them is
    # the outcome part, paid at the last token.
    steps: list[list[tuple[int, float]]] | None = None


@dataclass
class Component:
    """One reward function of a composition and how it enters the total."""

    name: str
    fn: Callable
    weight: float = 1.0
    combine: str = "sum"  # sum | product | gate
    gate_min: float = 1.0
    clip_min: float | None = None
    clip_max: float | None = None
    batched: bool = False  # fn takes lists
    pool: WorkerPool | RayRewardPool | None = None  # run in worker processes (or Ray actors) with a deadline per call
    grouped: bool = False  # fn takes one group's lists at a time (functions.grouped)

    def __post_init__(self):
        self.takes_tokens = takes_tokens(self.fn)  # given completion_tokens when they are known

    def evaluate(self, completions: list[str], samples: list[dict],
                 completion_tokens: list[int] | None = None) -> list[Outcome]:
        """One outcome per completion. Each call gets its own copy of its sample (and a batched
        one a fresh list of completions), as a worker process does: a reward that changes what
        it is given changes nothing another reward, the next row of its group or the dataset sees."""
        if self.pool is not None:
            return self.pool.map(completions, samples, completion_tokens)
        with SigintWatch() as watch:
            if self.batched:
                outcomes = self._batch(list(completions), [copy.deepcopy(s) for s in samples],
                                       None if completion_tokens is None else list(completion_tokens))
            else:
                tokens = [None] * len(completions) if completion_tokens is None else completion_tokens
                outcomes = []
                for completion, sample, n in zip(completions, samples, tokens):
                    kwargs = {TOKENS: n} if self.takes_tokens and n is not None else {}
                    outcomes.append(call_guarded(self.fn, completion, copy.deepcopy(sample), **kwargs))
                    watch.check()  # a real Ctrl-C the reward caught still stops the run
            watch.check()
        return outcomes

    def _batch(self, completions: list[str], samples: list[dict], tokens: list[int] | None) -> list[Outcome]:
        if not self.grouped:
            return self._call_batch(completions, samples, tokens)
        outcomes: list[Outcome] = [Outcome(error="no score")] * len(completions)
        for rows in group_rows(samples):  # one call per group, its scores put back in the batch's order
            for row, outcome in zip(rows, self._call_batch([completions[r] for r in rows], [samples[r] for r in rows],
                                                           None if tokens is None else [tokens[r] for r in rows])):
                outcomes[row] = outcome
        return outcomes

    def _call_batch(self, completions: list[str], samples: list[dict], tokens: list[int] | None) -> list[Outcome]:
        kwargs = {TOKENS: tokens} if self.takes_tokens and tokens is not None else {}
        n = len(completions)  # before the call: the reward may empty the list it was given
        called = call_guarded(lambda: list(self.fn(completions, samples, **kwargs)))
        if called.error is not None:
            return [called] * n
        values = called.value
        if len(values) != n:
            wrong = Outcome(error=f"returned {len(values)} scores for {n} completions")
            return [wrong] * n
        return [Outcome(error="no score") if v is None else Outcome(value=v) for v in values]

    def clip(self, value: float) -> float:
        if self.clip_min is not None:
            value = max(value, self.clip_min)
        if self.clip_max is not None:
            value = min(value, self.clip_max)
        return value


def group_rows(samples: list[dict]) -> list[list[int]]:
    """The rows of each group, in order of first appearance: rows whose samples have the same
    id and prompt (a GRPO group: one sample, group_size completions), wherever they sit."""
    groups: dict[str, list[int]] = {}
    for row, sample in enumerate(samples):
        key = json.dumps([sample.get("id"), sample.get("prompt")], sort_keys=True, default=str)
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def _checked(name: str, outcome: Outcome) -> tuple[Outcome, dict[str, float]]:
    """The outcome's parts ({name: v} or {name/key: v}), or a failed outcome and no parts when
    its value is no number (a string is not read as one), a NaN or inf, or past float32's range."""
    if outcome.error is not None:
        return outcome, {}
    value = outcome.value
    try:  # the value's own __float__, .item() or .shape are the reward's code too: whatever they raise fails it
        parts = score_parts(name, value)
    except BaseException as err:  # noqa: BLE001 - TypeError for a string, OverflowError for an int past float's
        return Outcome(error=f"not a number or dict of numbers: {shown(value)} ({describe(err)}); a reward returns "
                             "a real number (a bool is 1 or 0), a dict of them with string keys, or StepScores"), {}
    # NaN or inf would poison the total, the advantages and the weights; so would a number
    # past float32's range, where the scores are kept
    if any(not math.isfinite(v) or abs(v) > FLOAT32_MAX for v in parts.values()):
        return Outcome(error=f"non-finite or out-of-range score {shown(value)}"), {}
    return outcome, parts


class CompositeReward:
    """Combine reward functions; each is logged as its own component (unweighted, unclipped).

    total = (sum over "sum" components of weight * clip(value))
            * (product over "product" components of clip(value))
            * (product over "gate" components of [value >= gate_min]).
    A gate ("format must pass before correctness counts") zeroes the total when it fails.
    A dict-valued function adds one component per key; its parts are summed to one value.
    A "sum" component that returns StepScores (a reward per step) also has its weighted step
    values, times the product and gate factors, recorded in RewardResult.steps, unless its
    clip changed its sum (then only the clipped sum counts, as an outcome). A group reward
    (functions.grouped: a win rate within the group) is called once per group of rows sharing
    a sample; a Logged value pays its value and logs its other numbers as components beside it.

    A function that raises (anything: SystemExit and KeyboardInterrupt too, but for a real
    Ctrl-C), times out in a worker pool, or returns NaN, +-inf or no number (a string is none)
    scores that sample 0 for its component (so a failing gate closes) and marks it failed;
    the error is logged once per (function, sample id) and the run goes on. A total that is still
    non-finite (finite parts that overflow, e.g. a product of 1e200s) scores 0 and fails too,
    so every total and component returned is finite."""

    def __init__(self, components: list[Component]):
        self.components = components
        self._reported: set[tuple[str, str]] = set()
        self.first_errors: dict[str, str] = {}  # component -> its first error, for the console and a stopped run

    def score(self, completions: list[str], samples: list[dict],
              completion_tokens: list[int] | None = None) -> RewardResult:
        """completion_tokens: how many tokens the policy generated for each completion, given to
        the rewards that take them (length rewards: a length in words or characters can be cut
        by invisible characters); None where they are not known."""
        import torch  # here, not at the top: reward worker processes import this module and need no torch

        n = len(completions)
        summed = torch.zeros(n)
        factor = torch.ones(n)
        failed = torch.zeros(n, dtype=torch.bool)
        components: dict[str, torch.Tensor] = {}
        failures: Counter = Counter()
        steps: list[list[tuple[int, float]]] = [[] for _ in range(n)]
        for comp in self.components:
            for i, outcome in enumerate(comp.evaluate(completions, samples, completion_tokens)):
                outcome, parts = _checked(comp.name, outcome)
                if outcome.error is not None:
                    self._report(comp.name, samples[i], outcome.error)
                    failed[i] = True
                    failures[comp.name] += 1
                for part, v in parts.items():
                    components.setdefault(part, torch.zeros(n))[i] = v
                if parts and isinstance(outcome.value, Logged):  # logged beside the score, never paid
                    for key, v in outcome.value.logged.items():
                        components.setdefault(f"{comp.name}/{key}", torch.zeros(n))[i] = float(v)
                value = comp.clip(sum(parts.values())) if parts else 0.0
                if comp.combine == "sum":
                    summed[i] += comp.weight * value
                    if parts and isinstance(outcome.value, StepScores) and value == float(outcome.value):
                        steps[i] += [(end, comp.weight * v) for end, v in zip(outcome.value.ends, outcome.value.values)]
                elif comp.combine == "product":
                    factor[i] *= value
                else:  # gate
                    factor[i] *= float(bool(parts) and value >= comp.gate_min)
        total = summed * factor
        for i in (~torch.isfinite(total)).nonzero().view(-1).tolist():  # finite parts can still overflow
            self._report("total", samples[i], f"non-finite total {float(total[i])!r} from finite components")
            failed[i] = True
            failures["total"] += 1
            total[i] = 0.0
            steps[i] = []
        if not any(steps):
            return RewardResult(total, components, failed, dict(failures))
        steps = [[(end, v * float(factor[i])) for end, v in row] for i, row in enumerate(steps)]
        return RewardResult(total, components, failed, dict(failures), steps)

    def formula(self) -> str:
        return reward_formula([(c.name, c.weight, c.combine, c.gate_min) for c in self.components])

    def components_for(self, sample: dict) -> list[Component]:
        """The components that score this sample: all of them (a task mixture's are its task's)."""
        return self.components

    def _report(self, name: str, sample: dict, error: str) -> None:
        self.first_errors.setdefault(name, f"on sample {sample.get('id', '?')}: {error}")
        sample_id = str(sample.get("id", "?"))
        if (name, sample_id) not in self._reported:
            self._reported.add((name, sample_id))
            log.warning("reward %s failed on sample %s (scored as failed): %s", name, sample_id, error)

    def close(self) -> None:
        """Stop the worker processes of pooled components."""
        for comp in self.components:
            if comp.pool is not None:
                comp.pool.close()


def build_reward(specs: list[RewardSpec], base_dir: str | Path = ".", section: str = "reward",
                 dtype: str = "auto", ray: RayConfig | None = None, empty_ok: bool = False,
                 device: str = "auto") -> CompositeReward:
    """The composite of a config's reward list; errors name `section[i].key`. A reward model
    in it computes in dtype on device (pass the policy's, train.dtype and device) unless its
    args.dtype or args.device is set.
    With ray.reward_workers, a reward's `workers: N` pool is N Ray actors (RayRewardPool).
    empty_ok: an empty list is a reward of 0 (the policy as its own referee adds the score)."""
    if not specs and not empty_ok:
        raise RewardError(f"{section}: at least one reward function is required")
    components: list[Component] = []
    for i, spec in enumerate(specs):
        key = f"{section}[{i}]"
        if spec.model is not None:  # a trained reward model: loaded now, once
            if spec.workers:
                raise RewardError(f"{key}.workers: a reward model scores in this process, in batches; set workers: 0")
            from aha.rewards.learned import learned_reward  # torch only where a reward model is named

            fn, is_batched, grouped = learned_reward(spec.model, spec.args, key, base_dir, dtype, device), True, False
            name = component_name(spec)
        else:
            fn = resolve_function(spec.fn, key=f"{key}.fn", base_dir=base_dir)
            is_batched, grouped = getattr(fn, "aha_batched", False), getattr(fn, "aha_grouped", False)
            args = with_config_folder(fn, spec.args, base_dir)
            if args:
                fn = bind_args(fn, args, key=f"{key}.args", batched=is_batched)
            name = component_name(spec)
        if any(name == other.name for other in components):
            raise RewardError(f"{key}: two rewards are named {name!r}; set {key}.name")
        if is_batched and spec.workers:
            raise RewardError(f"{key}.workers: {spec.fn} is a batched reward and runs in this process; set workers: 0")
        pool = None
        if spec.workers and ray is not None and ray.reward_workers:
            from aha.rewards.ray_pool import RayRewardPool

            pool = RayRewardPool(spec.fn, args, base_dir, spec.workers, spec.timeout_s, ray)
        elif spec.workers:
            pool = WorkerPool(spec.fn, args, base_dir, spec.workers, spec.timeout_s)
        components.append(Component(name, fn, spec.weight, spec.combine, spec.gate_min, spec.clip_min, spec.clip_max,
                                    is_batched, pool, grouped))
    return CompositeReward(components)
