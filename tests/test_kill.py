"""Kill at any moment: a run SIGKILLed inside a step, in the middle of a metrics line, with a
checkpoint half written or just renamed, during a held-out evaluation, or at a random time,
then resumed (again and again), ends with the metrics, samples and weights of a run never
stopped. The kill points are aha.tracking.faults.kill_point (AHA_KILL_AT=NAME:N)."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

ROOT = Path(__file__).parent.parent
CONFIGS = ROOT / "configs"
# every method, on the tiny model, 4 steps, a checkpoint and a held-out evaluation every 2
COMMON = ["model=tiny", "train.steps=4", "train.checkpoint_every=2", "train.keep_checkpoints=2", "train.report=false",
          "eval.every=2", "eval.limit=2", "eval.before=true", "eval.after=true", "task.name=arithmetic",
          "task.num_eval=4", "rollout.max_new_tokens=4", "eval.max_new_tokens=4"]
METHODS = {
    "rl": ["configs/quickstart.yaml", "rollout.prompts_per_step=2", "rollout.group_size=4",
           "algorithm.dynamic_sampling=false", "train.micro_batch_size=8"],
    "sft": ["configs/sft_arithmetic.yaml"],
    "dpo": ["configs/dpo_arithmetic.yaml"],
    "rm": ["configs/rm_arithmetic.yaml"],
    "prm": ["configs/prm_arithmetic.yaml"],
}
# (point, how many times the process passes it before the kill): every phase of a run
KILLS = [("step", 1), ("append", 3), ("checkpoint", 1), ("checkpoint-renamed", 1), ("eval", 1), ("eval-samples", 2),
         ("append", 1), ("step", 3), ("eval", 2)]
# the points each method passes (a reward model's held-out evaluation scores pairs: no sampling,
# no eval points), and how far into a point's passes a random kill may go: a resumed run passes
# a checkpoint or an evaluation once more at most, but writes many lines
POINTS = {method: ["step", "append", "checkpoint", "checkpoint-renamed"] + (["eval", "eval-samples"]
                                                                            if method not in ("rm", "prm") else [])
          for method in METHODS}
PASSES = {"append": 8}


def aha_train(folder: Path, method: str, kill: str | None = None, timeout: float | None = None) -> int:
    config, *overrides = METHODS[method]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("AHA_KILL_AT", None)
    if kill is not None:
        env["AHA_KILL_AT"] = kill
    command = [sys.executable, "-c", "import sys; from aha.cli import main; sys.exit(main())", "train",
               str(ROOT / config), *COMMON, *overrides, f"output_dir={folder}"]
    try:
        return subprocess.run(command, env=env, capture_output=True, timeout=timeout, cwd=ROOT).returncode
    except subprocess.TimeoutExpired:  # a kill at a random time: subprocess.run SIGKILLs the process
        return -signal.SIGKILL


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def comparable(run: Path) -> tuple:
    """What a run must reproduce: its metrics (timings aside), samples and final weights."""
    metrics = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in lines(run / "metrics.jsonl")]
    final = sorted((run / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))[-1]
    weights = {f.name: {k: t.tolist() for k, t in load_file(f).items()} for f in final.glob("*.safetensors")}
    return metrics, lines(run / "samples.jsonl"), final.name, weights


def random_kills(method: str, count: int) -> list[str]:
    """count kill points drawn at random: a phase the method passes, and which of its passes."""
    rng = random.Random(f"{method}:points")
    draws = [rng.choice(POINTS[method]) for _ in range(count)]
    return [f"{point}:{rng.randint(1, PASSES.get(point, 1))}" for point in draws]


def kill_and_resume(tmp_path: Path, method: str, kills: list[str], random_times: int = 0) -> list[bool]:
    """Kill a run at each of kills (and at random_times random moments), resuming each time,
    then finish it; returns whether each kill landed. Asserts it ends as the straight run."""
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    began = time.monotonic()
    assert aha_train(straight, method) == 0
    took = time.monotonic() - began  # random times fall within a whole run's length
    landed = []
    rng = random.Random(f"{method}:{len(kills)}:time")
    plan = [("point", k) for k in kills] + [("time", rng.uniform(0.3, 0.95) * took) for _ in range(random_times)]
    for kind, what in plan:
        code = aha_train(broken, method, kill=what) if kind == "point" else aha_train(broken, method, timeout=what)
        assert code in (0, -signal.SIGKILL), (kind, what, code)
        landed.append(code == -signal.SIGKILL)
        if code == 0:  # the run finished before the kill point: start it again for the next one
            for name in ("metrics.jsonl", "samples.jsonl", "groups.jsonl"):
                (broken / name).unlink(missing_ok=True)
            for folder in (broken / "checkpoints").glob("*"):
                subprocess.run(["rm", "-rf", str(folder)], check=True)
    assert aha_train(broken, method) == 0
    got, want = comparable(broken), comparable(straight)
    assert got[0] == want[0], "metrics differ"
    assert got[1] == want[1], "samples differ"
    assert got[2] == want[2] and got[3] == want[3], "final weights differ"
    return landed


def test_an_rl_run_killed_in_every_phase_resumes_as_if_never_stopped(tmp_path):
    kills = [f"{point}:{n}" for point, n in KILLS[:6]]
    assert all(kill_and_resume(tmp_path, "rl", kills))


@pytest.mark.slow
@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_killed_at_random_points_resumes_as_if_never_stopped(tmp_path, method):
    """Per method: the 9 phase kills, 5 kill points drawn at random (a phase the method
    passes and which of its passes) and 2 at random times. A point a resumed process does not
    reach again (an evaluation already behind the checkpoint) lets that run finish instead: at
    least 6 phase kills and 4 random points land in every method (at least 20 random kill
    points across the 5 methods), and every run ends as the straight one."""
    phases, drawn = [f"{point}:{n}" for point, n in KILLS], random_kills(method, 5)
    landed = kill_and_resume(tmp_path, method, phases + drawn, random_times=2)
    print(f"{method}: phase kills {sum(landed[:9])} of 9, random points {sum(landed[9:14])} of 5 {drawn}, "
          f"random times {sum(landed[14:])} of 2")
    assert sum(landed[:9]) >= 6 and sum(landed[9:14]) >= 4
