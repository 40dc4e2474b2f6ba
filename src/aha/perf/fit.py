"""Will a run fit: `aha plan`'s forecast of a config against this machine, and the check
`aha train` makes before the model loads (train.memory_check): refused when the forecast
peak is over the machine's whole memory, a warning when it is over the memory free now."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from aha.config import Config, ConfigError
from aha.perf.plan import Forecast, Workload, forecast, gib, memory_terms, to_fit

log = logging.getLogger(__name__)
HEADROOM = 0.9  # a suggested setting's forecast leaves a tenth of the memory free


@dataclass
class Plan:
    forecast: Forecast
    total: int | None  # this machine's memory, bytes
    available: int | None  # free now (MemAvailable)
    measured_now: bool = False  # this machine's costs were measured by this plan (else cached)
    fitting: dict | None = None  # config key -> the largest value whose forecast fits in the memory free now


def machine_memory() -> tuple[int | None, int | None]:
    """(total, available now) bytes of memory, from /proc/meminfo (Linux); (total, None) elsewhere."""
    try:
        info = {k: int(v.split()[0]) * 1024 for k, _, v in (line.partition(":") for line in
                                                         Path("/proc/meminfo").read_text().splitlines()) if v}
        return info.get("MemTotal"), info.get("MemAvailable")
    except (OSError, ValueError):
        try:
            return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), None
        except (ValueError, OSError, AttributeError):
            return None, None


def process_rss() -> int:
    """This process's resident bytes now: Python with torch, transformers and aha's trainer
    imported, which is where a run starts from."""
    import aha.training.loop  # noqa: F401 - what `aha train` imports before it loads the model

    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def lora_key(config: Config) -> tuple:
    lora = config.lora
    return (lora.rank, lora.alpha, lora.dropout, lora.target_modules) if lora.rank else ()


def make_plan(config: Config, with_time: bool = True) -> Plan:
    """The forecast of config on this machine; with_time also its step time (which measures
    this machine's costs once, ~10 s, then reads them from the cache)."""
    from aha.perf.profile import activation_bytes_per_token, cached_profile
    from aha.perf.workload import planned

    arch, work, key, hf_config, dtype = planned(config)
    baseline = process_rss()  # the tokenizer and the task read, as a run has them when its model loads
    saved = activation_bytes_per_token(hf_config, dtype, lora_key(config))
    total, available = machine_memory()
    if with_time:
        profile, fresh = cached_profile(hf_config, dtype, lora_key(config))
        found = Plan(forecast(arch, work, profile, baseline, key), total, available, fresh)
    else:
        found = Plan(Forecast(memory_terms(arch, work, saved, baseline, key), {}, list(work.notes)), total, available)
    if on_gpu(config):
        found.forecast.notes.append("the forecast is of a CPU run's process memory; on a GPU the weights, optimizer "
                                    "state and activations sit in the GPU's memory instead")
    limit = available or total
    if limit and found.forecast.peak_bytes > limit:
        found.fitting = largest_fitting(arch, work, saved, baseline, key, HEADROOM * limit)
    return found


def on_gpu(config: Config) -> bool:
    import torch

    return config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available())


def largest_fitting(arch, work: Workload, saved: float, baseline: float, key: str, limit: float) -> dict:
    """For the micro-batch and the engine's batch: the largest value (whole groups, down to
    one) whose forecast fits in limit, the other settings as they are."""
    G = work.group_size
    found = {}
    for name, field in (("train.micro_batch_size", "micro_rows"), ("rollout.batch_size", "engine_rows")):
        if field == "engine_rows" and not work.rounds:
            continue
        best = None
        for rows in sorted({G * k for k in range(1, getattr(work, field) // G + 1)}, reverse=True):
            if rows >= getattr(work, field):
                continue
            terms = memory_terms(arch, replace(work, **{field: rows}), saved, baseline, key)
            if Forecast(terms, {}).peak_bytes <= limit:
                best = rows
                break
        if best is not None:
            found[name] = best
    return found


def advice(plan: Plan, limit: float) -> str:
    """Which settings to change, largest term first, and values that would fit."""
    by_setting: dict[str, list] = {}
    for t in to_fit(plan.forecast, limit):
        by_setting.setdefault(t.setting, []).append(f"{t.name.split(' (')[0]} {gib(t.bytes)}")
    named = "; ".join(f"{k} ({', '.join(v)})" for k, v in by_setting.items()) or "a smaller model"
    fitting = ", ".join(f"{k}={v}" for k, v in (plan.fitting or {}).items())
    return f"change {named}" + (f"; fits with {fitting}" if fitting else "")


def check_before_training(config: Config, argv: list[str] | None = None) -> None:
    """train.memory_check before the model loads: refuse (a ConfigError) a run whose forecast is
    over the machine's whole memory, warn when it is over the memory free now. A forecast that
    cannot be made (an unknown architecture) is skipped, as is a torchrun rank (its launcher checked)."""
    mode = config.train.memory_check
    ranks = config.distributed.processes > 1 or config.ray.learner_workers > 1 or "WORLD_SIZE" in os.environ
    if mode == "ignore" or ranks or on_gpu(config):
        return  # the forecast is of one process on the CPU
    try:
        plan = make_plan(config, with_time=False)
    except ConfigError:
        return  # a method the plan does not forecast
    except Exception as err:  # noqa: BLE001 - the forecast is advice: it never stops a run it cannot make
        log.info("no memory forecast: %s: %s", type(err).__name__, err)
        return
    peak, total, available = plan.forecast.peak_bytes, plan.total, plan.available
    if total and peak > total and mode == "refuse":
        raise ConfigError(f"this run's forecast peak memory, {gib(peak)}, is over this machine's {gib(total)} and "
                          f"would be killed by the kernel: {advice(plan, available or total)} (`aha plan` shows every "
                          "term; train.memory_check=warn runs it anyway)")
    limit = available if available is not None else total
    if limit and peak > limit:
        print(f"warning: this run's forecast peak memory, {gib(peak)}, is over the {gib(limit)} free now "
              f"(of {gib(total or limit)}): {advice(plan, limit)} (`aha plan` shows every term)", file=sys.stderr,
              flush=True)


def plan_report(plan: Plan) -> str:
    """What `aha plan` prints under the forecast's table: whether it fits, and what to change."""
    from aha.perf.plan import format_forecast
    from aha.perf.profile import cpu_model

    f, lines = plan.forecast, []
    lines.append(format_forecast(f, plan.available, plan.total))
    peak = f.peak_bytes
    if plan.total and peak > plan.total:
        lines.append(f"does not fit: over this machine's {gib(plan.total)}; "
                     f"{advice(plan, plan.available or plan.total)}")
    elif plan.available and peak > plan.available:
        lines.append(f"fits this machine but not the {gib(plan.available)} free now; {advice(plan, plan.available)}")
    else:
        lines.append(f"fits, with {gib((plan.available or plan.total or peak) - peak)} to spare" if plan.total
                     else "fits (this machine's memory is unknown)")
    how = "measured now, then cached" if plan.measured_now else "cached"
    lines.append(f"machine: {cpu_model()}, {gib(plan.total) if plan.total else '? GiB'}; costs {how}")
    return "\n".join(lines)

