"""`aha train` on NVIDIA GPUs (`device: cuda`), for a machine that has them: `bash
bench/gpu_check.sh` runs these with the demo and the bench. Skipped where torch sees no GPU
(the machines this project is built on have none, so these have not run there)."""

from pathlib import Path

import pytest
import torch
from distributed_runs import (
    DPO,
    DPO_OVERRIDES,
    assert_same_checkpoint,
    assert_same_reference,
    assert_same_run,
    trained,
    write_rl_config,
)

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA GPU")]
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="two learner ranks need two GPUs (NCCL)")
FP32 = ["train.dtype=float32"]  # the comparisons: no bf16 rounding between the runs compared


@pytest.fixture(scope="module")
def rl_config(tmp_path_factory) -> Path:
    return write_rl_config(tmp_path_factory.mktemp("rl"))


@pytest.fixture(scope="module")
def rl_on_one_gpu(rl_config, tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("rl_gpu") / "run"
    return out, trained(rl_config, out, "device=cuda", *FP32)


def test_rl_on_a_gpu_takes_the_cpus_steps(rl_config, rl_on_one_gpu, tmp_path):
    """The same samples (uniform draws from the CPU's generator on both) and, in fp32, the same
    losses and rewards up to the devices' rounding (GPU and CPU kernels sum in other orders)."""
    _, gpu = rl_on_one_gpu
    cpu = trained(rl_config, tmp_path / "cpu", "device=cpu", *FP32)
    assert [r["step"] for r in gpu] == [r["step"] for r in cpu]
    for a, b in zip(cpu, gpu):
        for key in ("reward/mean", "reward/std", "loss/total", "kl/ref", "length/mean"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-3, abs=1e-5), (a["step"], key)


def test_rl_resumes_on_a_gpu_to_the_straight_runs_numbers(rl_config, rl_on_one_gpu, tmp_path):
    """One step, then the rest from its checkpoint (CUDA's random state saved with the CPU's)."""
    out, straight = rl_on_one_gpu
    run = tmp_path / "run"
    trained(rl_config, run, "device=cuda", *FP32, "train.steps=1", "eval.after=false")
    resumed = trained(rl_config, run, "device=cuda", *FP32, "train.resume=true")
    assert_same_run(straight, resumed, ["loss/total"])
    assert_same_checkpoint(out / "checkpoints/step-3", run / "checkpoints/step-3")


def test_auto_picks_the_gpu_and_bf16_where_it_has_it(rl_config, tmp_path):
    trained(rl_config, tmp_path / "auto", "train.steps=1")
    log = (tmp_path / "auto/log.txt").read_text()
    dtype = "torch.bfloat16" if torch.cuda.get_device_capability(0)[0] >= 8 else "torch.float32"  # native bf16
    assert f"on cuda:0, compute dtype {dtype}" in log


@two_gpus
def test_rl_on_two_gpu_ranks_takes_the_steps_one_gpu_takes(rl_config, rl_on_one_gpu, tmp_path):
    out, one = rl_on_one_gpu
    two = trained(rl_config, tmp_path / "two", "device=cuda", *FP32, "distributed.processes=2")
    assert_same_run(one, two, ["loss/total", "kl/ref", "grad_norm", "reward/std", "ref/reset"])
    assert_same_checkpoint(out / "checkpoints/step-3", tmp_path / "two/checkpoints/step-3")
    assert_same_reference(out / "checkpoints/step-3", tmp_path / "two/checkpoints/step-3")


@two_gpus
def test_dpo_on_two_gpu_ranks_takes_the_steps_one_gpu_takes(tmp_path):
    one = trained(DPO, tmp_path / "one", *DPO_OVERRIDES, "device=cuda", *FP32)
    two = trained(DPO, tmp_path / "two", *DPO_OVERRIDES, "device=cuda", *FP32, "distributed.processes=2")
    assert_same_run(one, two, ["pref/loss", "pref/margin", "grad_norm"])
    assert_same_checkpoint(tmp_path / "one/checkpoints/step-3", tmp_path / "two/checkpoints/step-3")
