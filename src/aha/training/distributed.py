"""Learner ranks on torch.distributed: who this process is, how its model is sharded, which part
of the global batch it trains, and how its loss is scaled so that N ranks take the step one
process takes.

torch's own engine does the work: FSDP2 (`torch.distributed.fsdp.fully_shard`, one unit per
decoder layer and one for the root, so each rank holds 1/N of the parameters, gradients and
optimizer state) or DDP (a full copy on each rank), over gloo on CPU and NCCL on CUDA. The
process group comes from torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...); without
it the run is one process and nothing here changes what it does."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

STRATEGIES = ("fsdp2", "ddp")


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
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"device must be auto, cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda, but torch sees no CUDA device (a CPU build of torch, or no GPU)")
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    placed = torch.device("cuda", local_rank % torch.cuda.device_count()) if use_cuda else torch.device("cpu")
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


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (Llama, Qwen, Mistral, GPT-2 shapes):
    FSDP2's units, one all-gather each in the forward pass."""
    inner = getattr(model, "model", None) or getattr(model, "transformer", None)
    layers = getattr(inner, "layers", None) or getattr(inner, "h", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no decoder layers found (model.model.layers or transformer.h)")
    return list(layers)


def shard(model: torch.nn.Module, strategy: str = "fsdp2", ranks: Ranks | None = None) -> torch.nn.Module:
    """The model spread over the process group, on this rank's device: fsdp2 shards every
    decoder layer and then the root (embeddings, final norm and head); ddp keeps a full copy on
    each rank and all-reduces gradients. FSDP2 shards in place and returns the same module; DDP
    wraps it. The device mesh is the rank's device type: left to itself, FSDP2 would put a
    CPU run's shards on a GPU the host happens to have."""
    if strategy not in STRATEGIES:
        raise ValueError(f"distributed.strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    ranks = ranks or Ranks(dist.get_rank(), dist.get_world_size())
    model = model.to(ranks.device)
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[ranks.device.index] if ranks.device.type == "cuda" else None)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(ranks.device.type, (ranks.world_size,))
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def rank_rows(n_rows: int, ranks: Ranks) -> slice:
    """This rank's contiguous share of a global batch of n_rows; the first n_rows % N ranks take
    one row more, so every row is trained exactly once."""
    base, extra = divmod(n_rows, ranks.world_size)
    start = ranks.rank * base + min(ranks.rank, extra)
    return slice(start, start + base + (1 if ranks.rank < extra else 0))


def global_sum(value: float, ranks: Ranks) -> float:
    """value summed over the ranks (a token count, a loss total); itself on one process."""
    if not ranks.distributed:
        return float(value)
    total = torch.tensor([float(value)], dtype=torch.float64, device=ranks.device)
    dist.all_reduce(total)
    return float(total.item())


def token_mean_scale(global_tokens: float, ranks: Ranks) -> float:
    """What a rank multiplies its summed token loss by so that the gradients torch reduces
    equal those of the token mean over the global batch: both FSDP2 and DDP average gradients
    over the N ranks, so each rank's share is scaled by N / (global token count). (aha's other
    loss aggregations follow the same rule: the normaliser counted over all ranks, times N.)"""
    if global_tokens <= 0:
        raise ValueError("the global batch has no token to train on")
    return ranks.world_size / global_tokens


def unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    """The model DDP wraps (FSDP2 shards in place: the model itself), so state dicts keep its names."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def full_state_dict(model: torch.nn.Module, ranks: Ranks) -> dict[str, torch.Tensor]:
    """Every parameter and buffer whole, on the CPU (gathered from the shards): what a
    checkpoint saves and what the sampling engine loads. Collective: every rank must call it;
    the tensors come back on rank 0 only (an empty dict elsewhere) when sharded."""
    if not ranks.distributed:
        return {k: v.detach().cpu() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    inner = unwrapped(model)
    return get_model_state_dict(inner, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder, ranks: Ranks) -> None:
    """The model's and the optimizer's state in torch's distributed checkpoint format: each rank
    writes its own shards, and a checkpoint saved by N ranks loads into any number (the loader
    reads the slices it needs). Collective: every rank must call it."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    inner = unwrapped(model)
    model_state, optimizer_state = get_state_dict(inner, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(folder))
    if ranks.distributed:
        dist.barrier()


def load_training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder, ranks: Ranks) -> None:
    """What save_training_state wrote, resharded to this world size, put into model and
    optimizer (an optimizer that has not stepped yet gets its moments from the file)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    inner = unwrapped(model)
    model_state, optimizer_state = get_state_dict(inner, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(inner, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
