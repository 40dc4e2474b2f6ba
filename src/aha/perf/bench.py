"""`aha bench`: the same GRPO setting trained by aha and by TRL's GRPOTrainer, alternating,
each run a process of its own, and what it measured per step: wall time (median of the steps
after the first, which warms caches), generated and trained tokens a second, each aha phase's
FLOP/s against this machine's measured matmul peak, peak memory, and the aha/TRL ratio with
min / median / max over the pairs."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# what the bench holds fixed in both trainers: TRL has no dynamic sampling, evaluation or
# checkpoints inside its steps
FORCED = ["algorithm.dynamic_sampling=false", "eval.before=false", "eval.after=false", "train.checkpoint_every=0",
          "train.report=false", "train.log_samples=0"]


@dataclass
class RunTimes:
    trainer: str  # aha | trl
    step_s: list[float]
    reward: list[float]
    completion_length: list[float]
    peak_rss_gb: float
    wall_s: float
    generate_s: list[float] = field(default_factory=list)  # aha's phases (TRL logs only the whole step)
    sync_s: list[float] = field(default_factory=list)
    score_s: list[float] = field(default_factory=list)

    def counted(self) -> range:
        """The steps the medians are over: all after the first (it warms caches), if any."""
        return range(1, len(self.step_s)) if len(self.step_s) > 1 else range(len(self.step_s))

    def median_step(self) -> float:
        return statistics.median(self.step_s[i] for i in self.counted())


def matmul_peak(dtype_name: str, n: int = 2048, repeats: int = 10, device: str = "cpu") -> float:
    """GFLOP/s of an n x n matmul on device (the CPU: in this process's threads): the best of
    `repeats` (a GPU's timed to the end of its kernel)."""
    import torch

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
    a, b = torch.randn(n, n).to(device, dtype), torch.randn(n, n).to(device, dtype)
    done = torch.cuda.synchronize if torch.device(device).type == "cuda" else lambda: None
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        done()
        t0 = time.perf_counter()
        a @ b
        done()
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


def _child(command: list[str], log: Path) -> tuple[int, float, float]:
    """Run command to the end; (exit code, peak RSS in GB, wall seconds)."""
    t0 = time.time()
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024 ** 2, time.time() - t0  # ru_maxrss is in KiB on Linux


def _tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def run_aha(config_path: str, overrides: list[str], steps: int, work: Path) -> RunTimes:
    out = work / "aha"
    command = [sys.executable, "-m", "aha.cli", "train", config_path, *overrides, *FORCED, f"train.steps={steps}",
               f"output_dir={out}", "train.resume=false"]
    code, rss, wall = _child(command, work / "aha.log")
    if code != 0:
        raise RuntimeError(f"aha's run failed (exit {code}):\n{_tail(work / 'aha.log')}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps_ = [r for r in records if "time/step_s" in r]
    return RunTimes("aha", [r["time/step_s"] for r in steps_], [r["reward/mean"] for r in steps_],
                    [r["length/mean"] for r in steps_], rss, wall, [r["time/generate_s"] for r in steps_],
                    [r.get("time/sync_s", 0.0) for r in steps_], [r.get("time/score_s", 0.0) for r in steps_])


def run_trl(config_path: str, overrides: list[str], steps: int, work: Path) -> RunTimes:
    result = work / "trl.json"
    command = [sys.executable, "-m", "aha.perf.trl_grpo", config_path, str(result), str(steps), *overrides, *FORCED]
    code, rss, wall = _child(command, work / "trl.log")
    if code != 0:
        raise RuntimeError(f"TRL's run failed (exit {code}); `pip install -e '.[bench]'` installs TRL:\n"
                           f"{_tail(work / 'trl.log')}")
    got = json.loads(result.read_text())
    return RunTimes("trl", got["step_s"], got["reward"], got["completion_length"], rss, wall)


def phase_rates(run: RunTimes, samples_per_step: int, prompts_per_step: int, prompt_tokens: float, params: int,
                peak_gflops: float) -> dict:
    """Per-step medians (steps after the first) of aha's phases: tokens a second and FLOP/s
    as a share of the matmul peak, counting 2 x params FLOPs a token forward and 6 x params
    forward + backward (attention and the embedding lookup left out: an estimate)."""
    gen, upd, sync = [], [], []
    for i in run.counted():
        generated = samples_per_step * run.completion_length[i]
        # what is not sampling, scoring or handing weights over: the update and its preparation
        scored = run.score_s[i] if i < len(run.score_s) else 0.0
        update_s = run.step_s[i] - run.generate_s[i] - scored - run.sync_s[i]
        trained = generated + prompts_per_step * prompt_tokens  # the learner runs each group's prompt once
        gen.append((generated / run.generate_s[i],
                    2 * params * (generated + prompts_per_step * prompt_tokens) / run.generate_s[i]))
        upd.append((trained / update_s, 6 * params * trained / update_s))
        sync.append(run.sync_s[i])
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    return {"generate_tokens_per_s": med(gen, 0), "generate_peak_share": med(gen, 1) / 1e9 / peak_gflops,
            "update_tokens_per_s": med(upd, 0), "update_peak_share": med(upd, 1) / 1e9 / peak_gflops,
            "sync_s": statistics.median(sync)}


def bench(config_path: str, overrides: list[str], steps: int = 6, pairs: int = 3, with_trl: bool = True,
          echo=print) -> dict:
    import torch

    from aha.config import load_config
    from aha.models import load
    from aha.models.compute import placement, resolve_dtype
    from aha.tasks import build_task, encode_prompts

    config = load_config(config_path, overrides + FORCED)
    if with_trl:
        from aha.perf.trl_grpo import unmatched

        if unmatched(config):
            raise ValueError("aha bench: TRL's side would not reproduce " + "; ".join(unmatched(config))
                             + ". Set them as the bench matches, or time aha alone with --no-trl")
    device, dtype = placement(config.device, config.train.dtype)
    native_bf16 = resolve_dtype("auto", device) == torch.bfloat16
    peaks = {name: matmul_peak(name, device=str(device)) for name in ("float32", "bfloat16")
             if name == "float32" or native_bf16}
    peak = peaks["bfloat16" if dtype == torch.bfloat16 else "float32"]
    loaded = load(config.model, seed=config.seed)
    params = sum(p.numel() for p in loaded.model.parameters())
    task = build_task(config.task, config.base_dir)
    prompt_tokens = statistics.mean(len(ids) for ids in encode_prompts(loaded.tokenizer, task, task.train[:200]))
    del loaded
    ro = config.rollout
    samples = ro.prompts_per_step * ro.group_size
    echo(f"bench: {config.model}, {ro.prompts_per_step} prompts x {ro.group_size} completions, <= {ro.max_new_tokens} "
         f"new tokens, {dtype} on {device}, rollout.engine={ro.engine}, {torch.get_num_threads()} threads; matmul peak "
         + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items()))
    runs: list[tuple[RunTimes, RunTimes | None]] = []
    with tempfile.TemporaryDirectory(prefix="aha-bench-") as tmp:
        for pair in range(pairs):
            work = Path(tmp) / f"pair{pair}"
            work.mkdir()
            aha = run_aha(config_path, overrides, steps, work)
            echo(f"pair {pair + 1}/{pairs}: aha {aha.median_step():.2f} s/step")
            trl = run_trl(config_path, overrides, steps, work) if with_trl else None
            if trl is not None:
                echo(f"pair {pair + 1}/{pairs}: TRL {trl.median_step():.2f} s/step "
                     f"(aha {trl.median_step() / aha.median_step():.2f}x faster)")
            runs.append((aha, trl))
    out = {"config": config_path, "overrides": overrides, "steps": steps, "pairs": pairs, "dtype": str(dtype),
           "device": str(device),
           "engine": config.rollout.engine,
           "threads": torch.get_num_threads(), "matmul_peak_gflops": peaks, "params": params,
           "prompt_tokens_mean": prompt_tokens, "samples_per_step": samples,
           "runs": [{"aha": asdict(a), "trl": asdict(t) if t else None} for a, t in runs],
           "aha": [phase_rates(a, samples, ro.prompts_per_step, prompt_tokens, params, peak) | {
               "step_s": a.median_step(), "peak_rss_gb": a.peak_rss_gb} for a, _ in runs]}
    if with_trl:
        ratios = [t.median_step() / a.median_step() for a, t in runs]
        out["trl"] = [{"step_s": t.median_step(), "peak_rss_gb": t.peak_rss_gb} for _, t in runs]
        out["speedup"] = {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}
    echo(table(out))
    return out


def table(result: dict) -> str:
    rows = ["| pair | trainer | s/step (median, steps 2+) | reward first -> last | generated tok/s | trained tok/s "
            "| generate / update FLOP share of peak | weight sync s | peak RSS GB |",
            "|---|---|---|---|---|---|---|---|---|"]
    for i, (run, rates) in enumerate(zip(result["runs"], result["aha"]), 1):
        a = run["aha"]
        rows.append(f"| {i} | aha | {rates['step_s']:.2f} | {a['reward'][0]:.2f} -> {a['reward'][-1]:.2f} | "
                    f"{rates['generate_tokens_per_s']:.0f} | {rates['update_tokens_per_s']:.0f} | "
                    f"{rates['generate_peak_share']:.0%} / {rates['update_peak_share']:.0%} | {rates['sync_s']:.2f} | "
                    f"{a['peak_rss_gb']:.1f} |")
        if run["trl"]:
            t = run["trl"]
            rows.append(f"| {i} | TRL | {result['trl'][i - 1]['step_s']:.2f} | "
                        f"{t['reward'][0]:.2f} -> {t['reward'][-1]:.2f} | | | | | {t['peak_rss_gb']:.1f} |")
    if "speedup" in result:
        s = result["speedup"]
        rows.append(f"\naha is {s['median']:.2f}x faster than TRL per step (min {s['min']:.2f}, max {s['max']:.2f} "
                    "over "
                    f"{result['pairs']} pairs)")
    return "\n".join(rows)
