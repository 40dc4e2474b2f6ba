"""Learner ranks on torch.distributed (aha.training.distributed): two CPU ranks over gloo,
started by torchrun, take the very steps one process takes on the same global batch (FSDP2
shards and DDP copies alike), and the pieces they rest on, by hand."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from aha.training.distributed import Ranks, init_ranks, rank_passes, rank_rows, token_mean_scale
from aha.training.placement import decoder_layers, place
from aha.training.rl.update import Shape

STEP = Path(__file__).parent / "distributed_step.py"


def launch(out: Path, ranks: int, strategy: str = "fsdp2", *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    env["HF_HUB_OFFLINE"] = "1"
    if ranks == 1:
        command = [sys.executable, str(STEP), str(out), strategy, *extra]
    else:
        # --standalone: the rendezvous store binds a free port itself, on this machine only
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
                   str(STEP), str(out), strategy, *extra]
    launched = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = launched.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        launched.terminate()  # torchrun passes SIGTERM on to its ranks (a SIGKILL would orphan them)
        launched.communicate(timeout=30)
        raise
    return subprocess.CompletedProcess(command, launched.returncode, stdout, stderr)


def run_step(out: Path, ranks: int, strategy: str = "fsdp2", *extra: str) -> dict:
    done = launch(out, ranks, strategy, *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "losses.json").read_text())


@pytest.mark.slow  # aha train's own kill test is in the default suite (tests/test_distributed_train.py)
def test_a_rank_that_dies_mid_run_stops_every_rank_and_is_named(tmp_path):
    """Rank 1 exits at step 2 while rank 0 is in the step's collectives: rank 0 stops within
    seconds too (gloo sees the peer's connection close, or torchrun stops it first), the run
    fails naming rank 1 and its exit code, and its last words are on stderr; the state saved
    before resumes (test_a_training_state_saved_by_n_ranks_resumes_on_any_number)."""
    started = time.monotonic()
    done = launch(tmp_path / "out", 2, "fsdp2", "--die", "1", "2")
    assert done.returncode != 0 and time.monotonic() - started < 120
    report = done.stderr[done.stderr.index("Failures:"):]  # the first failure seen may be either rank
    assert re.search(r"rank      : 1 \(local_rank: 1\)\n\s+exitcode  : 3", report), report
    assert "rank 1: dying at step 2" in done.stderr


@pytest.mark.parametrize("strategy", ["fsdp2", "ddp"])
def test_two_cpu_ranks_take_the_steps_one_process_takes(tmp_path, strategy):
    one = run_step(tmp_path / "one", 1)
    two = run_step(tmp_path / "two", 2, strategy)
    assert two["world_size"] == 2 and two["rows"] == [0, 3]  # rank 0 trained half the rows
    assert two["losses"] == pytest.approx(one["losses"], abs=1e-5)
    assert two["grad_norms"] == pytest.approx(one["grad_norms"], rel=1e-5)  # the loss scale, which AdamW hides
    assert one["losses"][-1] < one["losses"][0]  # the steps did train
    whole, sharded = load_file(tmp_path / "one/weights.safetensors"), load_file(tmp_path / "two/weights.safetensors")
    assert whole.keys() == sharded.keys()
    for name, tensor in whole.items():
        assert sharded[name].shape == tensor.shape
        assert torch.allclose(sharded[name], tensor, atol=1e-5), name


@pytest.mark.slow  # aha train's own cross-resume is in the default suite (tests/test_distributed_train.py)
@pytest.mark.parametrize("saved_by, resumed_by", [(2, 1), (1, 2)])
def test_a_training_state_saved_by_n_ranks_resumes_on_any_number(tmp_path, saved_by, resumed_by):
    """One step, saved (weights and AdamW moments gathered whole, as aha's checkpoints hold them),
    then two more on another world size: the same losses and weights as three steps straight."""
    straight = run_step(tmp_path / "straight", 1)
    first = run_step(tmp_path / "first", saved_by, "fsdp2", "--steps", "1", "--save", str(tmp_path / "state"))
    rest = run_step(tmp_path / "rest", resumed_by, "fsdp2", "--steps", "2", "--load", str(tmp_path / "state"))
    assert first["losses"] + rest["losses"] == pytest.approx(straight["losses"], abs=1e-5)
    whole = load_file(tmp_path / "straight/weights.safetensors")
    resumed = load_file(tmp_path / "rest/weights.safetensors")
    for name, tensor in whole.items():
        assert torch.allclose(resumed[name], tensor, atol=1e-5), name


def test_rank_rows_cover_the_batch_once():
    shares = [rank_rows(10, Ranks(rank=r, world_size=4)) for r in range(4)]
    assert [(s.start, s.stop) for s in shares] == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert rank_rows(5, Ranks()) == slice(0, 5)
    assert [rank_rows(1, Ranks(rank=r, world_size=2)) for r in range(2)] == [slice(0, 1), slice(1, 1)]


def test_the_token_mean_scale_undoes_the_ranks_averaging():
    # two ranks averaging their gradients: each scales its summed loss by 2 / 40
    assert token_mean_scale(40, Ranks(rank=1, world_size=2)) == pytest.approx(0.05)
    assert token_mean_scale(40, Ranks()) == pytest.approx(1 / 40)
    with pytest.raises(ValueError, match="no token to train on"):
        token_mean_scale(0, Ranks())


def test_bad_settings_name_what_is_wrong(monkeypatch):
    for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    assert init_ranks("cpu") == Ranks()  # no torchrun: one process, nothing joined
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda, got 'tpu'"):
        init_ranks("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device: cuda, but torch sees no CUDA device"):
            init_ranks("cuda")
    with pytest.raises(ValueError, match="distributed.strategy must be one of fsdp2, ddp, got 'zero3'"):
        place(torch.nn.Linear(2, 2), "zero3")
    with pytest.raises(ValueError, match="Linear: no decoder layers found \\(a ModuleList named layers or h\\)"):
        decoder_layers(torch.nn.Linear(2, 2))


def test_rank_passes_split_every_micro_batch_and_keep_the_ranks_in_step():
    """Each rank takes a contiguous part of every micro-batch (whole groups of a slice), at
    factor N; a rank left without a part repeats the first unit at factor 0, so both ranks make
    the same passes. One process: every micro-batch whole, at factor 1."""
    two = [Ranks(rank=r, world_size=2) for r in range(2)]
    lists = [[0, 1, 2], [3]]
    assert rank_passes(lists, Ranks()) == [([0, 1, 2], 1.0), ([3], 1.0)]
    assert rank_passes(lists, two[0]) == [([0, 1], 2.0), ([3], 2.0)]
    assert rank_passes(lists, two[1]) == [([2], 2.0), ([3], 0.0)]
    slices = [slice(0, 8), slice(8, 12)]  # groups of 4 rows
    assert rank_passes(slices, two[0], unit=4) == [(slice(0, 4), 2.0), (slice(8, 12), 2.0)]
    assert rank_passes(slices, two[1], unit=4) == [(slice(4, 8), 2.0), (slice(8, 12), 0.0)]


def test_two_ranks_cut_the_micro_batches_one_process_cuts():
    """With train.micro_batch_size rows on each rank, the step's micro-batches over two ranks
    hold twice as many, and each rank's parts are the micro-batches one process makes."""
    shape = Shape(group_size=4, micro_batch_size=4, share_prompt=True, temperature=1.0, dtype=torch.float32)
    assert shape.micro_slices(12) == [slice(0, 4), slice(4, 8), slice(8, 12)]
    assert shape.micro_slices(12, ranks=2) == [slice(0, 8), slice(8, 12)]
    parts = [part for rank in range(2)
             for part, factor in rank_passes(shape.micro_slices(12, 2), Ranks(rank, 2), unit=4) if factor]
    assert sorted(parts, key=lambda s: s.start) == shape.micro_slices(12)
