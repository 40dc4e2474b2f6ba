"""Learner ranks on torch.distributed: who this process is, how its model is sharded, which part
of the global batch it trains, and how its loss is scaled so that N ranks take the step one
process takes.

torch's own engine does the work: FSDP2 (`torch.distributed.fsdp.fully_shard`, one unit per
decoder layer, so each rank holds 1/N of the layers' parameters, gradients and optimizer
state) or DDP's arithmetic (a full copy on each rank, gradients averaged by all-reduce), over
gloo on CPU and NCCL on CUDA. The process group comes from torchrun's environment (RANK,
WORLD_SIZE, MASTER_ADDR, ...); without it the run is one process and nothing here changes
what it does."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from aha.models.compute import resolve_device


@dataclass(frozen=True)
class Ranks:
    """This process's place among the learner ranks."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        """Rank 0 owns the run folder, the metrics and the report."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def backend_for(device: torch.device) -> str:
    """NCCL between CUDA devices, gloo between CPU processes."""
    return "nccl" if device.type == "cuda" else "gloo"


def init_ranks(device: str = "auto", timeout_s: float | None = None) -> Ranks:
    """The ranks torchrun started (its environment), with the process group joined; one
    process (rank 0 of 1) when the environment names no world. device: auto picks CUDA (this
    rank's local GPU; the only one it sees where the launcher gave each process its own) where
    there is one, else the CPU. timeout_s: how long a collective waits for a rank that neither
    answers nor dies (torch's default, 30 minutes on gloo, when None)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    placed = resolve_device(device, local_rank)
    use_cuda = placed.type == "cuda"
    if use_cuda:
        torch.cuda.set_device(placed)
    if world_size > 1 and not dist.is_initialized():
        waits = {} if timeout_s is None else {"timeout": timedelta(seconds=timeout_s)}
        dist.init_process_group(backend_for(placed), device_id=placed if use_cuda else None, **waits)
    return Ranks(rank, world_size, local_rank, placed)


def close_ranks(ranks: Ranks) -> None:
    """Leave the process group together: a barrier first, so no rank tears its connections down
    while another is still finishing (writing the run's files); without it a gloo rank could be
    left waiting at exit after its peer had gone (seen with DDP on a loaded 2-core machine)."""
    if ranks.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def is_sharded(tensor: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(tensor, DTensor)


def whole_tensor(tensor):
    """A sharded tensor gathered whole (collective: every rank must call it), else the tensor."""
    return tensor.full_tensor() if is_sharded(tensor) else tensor


def slice_like(full: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """This rank's slice of the whole tensor full, sharded as target is (each rank cuts its own:
    no traffic)."""
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(full.to(target.device), target.device_mesh, target.placements, src_data_rank=None)


def reduce_gradients(parameters, ranks: Ranks) -> None:
    """Average the gradients of the whole (unsharded) parameters over the ranks, one all-reduce
    per dtype; FSDP2 has already reduce-scattered the sharded ones in the backward pass."""
    if not ranks.distributed:
        return
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    grads = [p.grad for p in parameters if p.grad is not None and not is_sharded(p)]
    for dtype in sorted({g.dtype for g in grads}, key=str):
        same = [g for g in grads if g.dtype == dtype]
        flat = _flatten_dense_tensors(same)
        dist.all_reduce(flat)
        flat /= ranks.world_size
        for grad, reduced in zip(same, _unflatten_dense_tensors(flat, same)):
            grad.copy_(reduced)


def clip_gradients(parameters, max_norm: float, ranks: Ranks) -> float:
    """The gradient norm over every parameter, whole and sharded, and the gradients scaled down
    to max_norm where it is above (torch's clip_grad_norm_; on one process, that call itself).
    Every rank gets the same norm, so every rank takes (or skips) the same step."""
    parameters = [p for p in parameters if p.grad is not None]
    if not ranks.distributed:
        return float(torch.nn.utils.clip_grad_norm_(parameters, max_norm))
    sharded = torch.zeros((), dtype=torch.float64, device=ranks.device)
    whole = torch.zeros((), dtype=torch.float64, device=ranks.device)
    for p in parameters:
        if is_sharded(p):
            sharded += p.grad.to_local().double().pow(2).sum()
        else:
            whole += p.grad.double().pow(2).sum()
    dist.all_reduce(sharded)  # each rank holds its own slice; the whole ones are alike everywhere
    total = float((sharded + whole).sqrt())
    scale = max_norm / (total + 1e-6)
    if scale < 1.0:
        for p in parameters:
            p.grad.mul_(scale)
    return total


def rank_passes(items: list, ranks: Ranks, unit: int = 1) -> list[tuple[object, float]]:
    """This rank's part of each of a step's micro-batches (a list of indices, or a slice of rows
    cut at whole units of `unit` rows: an RL group), with the factor its loss is multiplied by: N,
    because the N ranks' gradients are averaged (1 on one process, where each item is whole).
    Each rank takes a contiguous part of every micro-batch, so every rank makes one pass per
    micro-batch, its collectives meeting its peers', and N ranks hold 1/N of each micro-batch's
    activations. A rank whose part is empty (a micro-batch with fewer units than ranks) repeats
    the first unit at factor 0: no gradient, no result."""
    if not ranks.distributed:
        return [(item, 1.0) for item in items]
    return [_rank_part(item, ranks, unit) for item in items]


def scaled_backward(loss: torch.Tensor, factor: float) -> None:
    """loss times a pass's factor (rank_passes), backpropagated; at factor 1 (one process) the
    loss itself, so that one process's gradients stay bitwise what they were."""
    (loss if factor == 1.0 else loss * factor).backward()


def _rank_part(item, ranks: Ranks, unit: int) -> tuple[object, float]:
    if isinstance(item, slice):
        mine = rank_rows((item.stop - item.start) // unit, ranks)
        if mine.stop > mine.start:
            return slice(item.start + mine.start * unit, item.start + mine.stop * unit), float(ranks.world_size)
        return slice(item.start, item.start + unit), 0.0
    mine = item[rank_rows(len(item), ranks)]
    return (mine, float(ranks.world_size)) if len(mine) else (item[:1], 0.0)


def interleaved(results: list, ranks: Ranks) -> list:
    """Each pass's results from every rank, in pass order then rank order (the micro-batches'
    own order, each rank's part being contiguous); None marks a pass with no result. Every rank
    gets the whole list; results itself on one process."""
    if not ranks.distributed:
        return results
    parts = [None] * ranks.world_size
    dist.all_gather_object(parts, results)
    return [part[i] for i in range(len(results)) for part in parts if part[i] is not None]


def gathered(local: list, ranks: Ranks) -> list:
    """The ranks' lists joined in rank order (every rank gets the whole); local on one process."""
    if not ranks.distributed:
        return local
    parts = [None] * ranks.world_size
    dist.all_gather_object(parts, local)
    return [item for part in parts for item in part]


def shared(value, ranks: Ranks):
    """Rank 0's value on every rank (pickled through the process group); value on one process."""
    if not ranks.distributed:
        return value
    box = [value if ranks.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def peak_memory(ranks: Ranks) -> str:
    """What each learner rank held at its peak (rank 0 also holds the whole copies): resident
    memory, and on CUDA the memory torch allocated on the rank's GPU. Collective."""
    import resource  # Unix only, like torchrun; ru_maxrss is in KiB on Linux

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    gpu = torch.cuda.max_memory_allocated(ranks.device) / 2**30 if ranks.device.type == "cuda" else None
    peaks = gathered([(rss, gpu)], ranks)
    line = "peak resident memory by learner rank: " + ", ".join(f"{r}: {p:.2f} GiB" for r, (p, _) in enumerate(peaks))
    if gpu is not None:
        line += "; peak GPU memory allocated: " + ", ".join(f"{r}: {g:.2f} GiB" for r, (_, g) in enumerate(peaks))
    return line


def rank_rows(n_rows: int, ranks: Ranks) -> slice:
    """This rank's contiguous share of a global batch of n_rows; the first n_rows % N ranks take
    one row more, so every row is trained exactly once."""
    base, extra = divmod(n_rows, ranks.world_size)
    start = ranks.rank * base + min(ranks.rank, extra)
    return slice(start, start + base + (1 if ranks.rank < extra else 0))


def global_sum(value: float, ranks: Ranks) -> float:
    """value summed over the ranks (a token count, a loss total); itself on one process."""
    return summed({"value": float(value)}, ranks)["value"]


def summed(totals: dict[str, float], ranks: Ranks) -> dict[str, float]:
    """Each value summed over the ranks, in one all-reduce; totals itself on one process."""
    if not ranks.distributed:
        return totals
    values = torch.tensor(list(totals.values()), dtype=torch.float64, device=ranks.device)
    dist.all_reduce(values)
    return dict(zip(totals, values.tolist()))


def token_mean_scale(global_tokens: float, ranks: Ranks) -> float:
    """What a rank multiplies its summed token loss by so that the gradients torch reduces
    equal those of the token mean over the global batch: gradients are averaged over the N
    ranks, so each rank's share is scaled by N / (global token count)."""
    if global_tokens <= 0:
        raise ValueError("the global batch has no token to train on")
    return ranks.world_size / global_tokens


def join_ranks(config) -> Ranks:
    """The learner ranks a run trains on: torchrun's world when this process is one of its ranks
    (the process group joined), else one process. distributed.processes > 1 outside torchrun is
    an error here: `aha train` starts torchrun itself (cli), a Python caller must do the same."""
    from aha.config import ConfigError

    world = int(os.environ.get("WORLD_SIZE", "1"))
    wanted = config.distributed.processes
    if world == 1 and wanted > 1:
        raise ConfigError(f"distributed.processes={wanted} but this process is not one of torchrun's ranks: run "
                          f"`aha train` (it starts them), or `torchrun --nproc_per_node {wanted} -m aha.cli train ...`")
    if world > 1 and wanted not in (1, world):
        raise ConfigError(f"distributed.processes={wanted} but torchrun started {world} ranks: leave "
                          "distributed.processes at 1 under your own torchrun, or make them agree")
    try:
        resolve_device(config.device)  # device: cuda where torch sees none, before any rank is joined
    except ValueError as err:
        raise ConfigError(str(err)) from None
    return init_ranks(config.device, config.distributed.timeout_s)
