"""What the learner-rank tests share (tests/test_distributed_train.py, tests/test_ray_learners.py):
`aha train` as a subprocess, a tiny RL config whose reward varies, and the comparisons of a
run on several ranks with one process's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

# Every run here is fp32 (train.dtype): bf16 autocast rounds each matmul's output to 8 bits, and
# on some CPUs (Zen 4) the way a kernel blocks a batch, which the ranks' cut of it decides, tips
# that rounding, so the comparison would measure the kernel's blocking rather than the ranks.
# a reward whose values differ between the tiny model's random completions, so every step trains
REWARD = '''def vowels(completion, sample):
    return sum(c in "aeiou" for c in completion) / max(len(completion), 1)
'''
RL = """method: rl
model: tiny
task: {name: arithmetic, num_eval: 4}
reward: [{fn: rewards.py:vowels}]
rollout: {prompts_per_step: 3, group_size: 4, max_new_tokens: 8}
train: {steps: 3, lr: 1.0e-3, micro_batch_size: 4, checkpoint_every: 1, report: false, dtype: float32}
algorithm: {kl_coef: 0.05, ref_reset_every: 2}
eval: {max_new_tokens: 4}
"""
DPO_OVERRIDES = ["model=tiny", "train.steps=3", "task.num_eval=4", "eval.max_new_tokens=4", "train.report=false",
                 "train.lr=1e-3", "dpo.batch_size=5", "train.micro_batch_size=2", "train.dtype=float32"]
DPO = Path(__file__).parent.parent / "configs/dpo_arithmetic.yaml"
# what two ranks may differ from one process by: the order in which gradients are summed
TOLERANCE = 1e-5
# A metric may differ by a few of fp32's roundings of itself (a log-probability of -197 is
# rounded to 1.5e-5).
RELATIVE = 1e-6
# Adam divides each update by the gradient's own size, so an element whose gradient sums to
# about zero moves by up to lr one way or the other as the summation order tips it: on an AVX2
# EPYC one weight in 8,192 moved 1.2e-5 apart, one in 4,096 1.3e-4. A wrong reduction, a lost
# shard or a missed rate moves nearly every element, so a tensor may hold this share beyond
# TOLERANCE (none in one of fewer than 1,000), each within TIPPED_BY: twice the learning rates of
# the tests' three steps (1e-3, then at most 3e-3 twice), an update turned about at every step.
ADAM_TIPPED = 1e-3
TIPPED_BY = 2 * (1e-3 + 3e-3 + 3e-3)


def aha_train(config: Path, out: Path, *overrides: str, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                              "MASTER_PORT", "AHA_KILL_AT", "AHA_STALL_AT")}
    command = [sys.executable, "-m", "aha.cli", "train", str(config), f"output_dir={out}", *overrides]
    launched = subprocess.Popen(command, env={**clean, "HF_HUB_OFFLINE": "1", **(env or {})}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = launched.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        launched.terminate()  # torchrun passes SIGTERM on to its ranks
        launched.communicate(timeout=30)
        raise
    return subprocess.CompletedProcess(command, launched.returncode, stdout, stderr)


def trained(config: Path, out: Path, *overrides: str) -> list[dict]:
    done = aha_train(config, out, *overrides)
    assert done.returncode == 0, done.stderr[-4000:]
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def assert_same_run(one: list[dict], two: list[dict], keys: list[str], rel: float = RELATIVE) -> None:
    """Every step's and evaluation's record: the same keys, numbers within TOLERANCE (or rel of
    themselves: a gradient norm of 80 differs by fp32's rounding of it)."""
    assert [r["step"] for r in one] == [r["step"] for r in two]
    for a, b in zip(one, two):
        assert set(a) == set(b)
        for key in a:
            if not key.startswith("time/") and isinstance(a[key], (int, float)):
                assert b[key] == pytest.approx(a[key], abs=TOLERANCE, rel=rel), (a["step"], key)
    for key in keys:  # the numbers that show the steps trained
        assert any(r.get(key) for r in one), key


def assert_same_weights(one: Path, two: Path, file: str) -> None:
    """The same tensors, within TOLERANCE, in one checkpoint file of two checkpoint folders."""
    a, b = load_file(one / file), load_file(two / file)
    assert a.keys() == b.keys()
    for name in a:
        assert_close(a[name], b[name], (file, name))


def assert_close(a: torch.Tensor, b: torch.Tensor, where: tuple) -> None:
    """a and b within TOLERANCE but for ADAM_TIPPED of their elements, which are within TIPPED_BY;
    integers (an optimizer's step count) exactly."""
    assert a.shape == b.shape and a.dtype == b.dtype, where
    if not a.is_floating_point():
        assert torch.equal(a, b), where
        return
    gap = (a.double() - b.double()).abs()
    apart = int((gap > TOLERANCE).sum())
    assert apart <= int(ADAM_TIPPED * a.numel()), (*where, f"{apart} of {a.numel()} elements apart")
    if apart:
        assert float(gap.max()) <= TIPPED_BY, (*where, f"an element {float(gap.max()):.2e} apart")


def assert_same_checkpoint(one: Path, two: Path) -> None:
    """The same weights, and the same optimizer moments in the same format (one process's)."""
    assert_same_weights(one, two, "model.safetensors")
    state_a, state_b = (torch.load(p / "trainer.pt", weights_only=False)["optimizers"]["policy"] for p in (one, two))
    assert state_a["param_groups"] == state_b["param_groups"]
    assert state_a["state"].keys() == state_b["state"].keys()
    for index, moments in state_a["state"].items():
        for key, value in moments.items():
            assert not hasattr(state_b["state"][index][key], "device_mesh")  # whole tensors, not shards
            assert_close(torch.as_tensor(value), torch.as_tensor(state_b["state"][index][key]), (index, key))


def assert_same_reference(one: Path, two: Path) -> None:
    """The same RL reference (saved where ProRL's resets may move it: reference.safetensors)."""
    assert_same_weights(one, two, "reference.safetensors")


def write_rl_config(folder: Path) -> Path:
    """RL's config and its reward file in folder; the config's path."""
    (folder / "rewards.py").write_text(REWARD)
    (folder / "rl.yaml").write_text(RL)
    return folder / "rl.yaml"
