"""Where each learner rank's copy of a trained module lives: FSDP2's shards of its decoder
layers or DDP's whole copy, on the rank's device, every rank starting from rank 0's values
(training/distributed.py: the ranks and their collectives; training/shards.py: which modules
are placed, with rank 0's whole copies)."""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist

from aha.training.distributed import Ranks, is_sharded, slice_like

STRATEGIES = ("fsdp2", "ddp")


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (Llama, Qwen, Mistral, GPT-2 shapes),
    also inside a LoRA wrapper, a reward model or a critic: FSDP2's units, one all-gather each in
    the forward pass. They are the ModuleLists named `layers` or `h`."""
    layers = [block for name, module in model.named_modules() if isinstance(module, torch.nn.ModuleList)
              and name.rsplit(".", 1)[-1] in ("layers", "h") for block in module]
    if not layers:
        raise ValueError(f"{type(model).__name__}: no decoder layers found (a ModuleList named layers or h)")
    return layers


def place(model: torch.nn.Module, strategy: str = "fsdp2", ranks: Ranks | None = None,
          source: torch.nn.Module | None = None) -> torch.nn.Module:
    """The model on this rank's device, spread over the process group, in place (the same
    module comes back, so every caller keeps its reference). Every rank takes rank 0's values:
    source's, rank 0's whole copy of the model (None: rank 0 copies its model before sharding
    it). On the other ranks the model may be built on the meta device (shapes, no data): such a
    rank then only ever holds its shards, one whole tensor at a time passing through. fsdp2
    shards each decoder layer (`fully_shard`: 1/N of its parameters, gradients and optimizer
    state on each rank, all-gathered for its forward and backward); the rest (embeddings, final
    norm, LM head, a reward head: a small share of a large model) stays whole on every rank,
    because the learner reads the head's weight directly (training/logprobs.py), outside any
    module call FSDP2 could hook. ddp keeps everything whole on every rank. What is whole has
    its gradients averaged by reduce_gradients before the optimizer steps."""
    if strategy not in STRATEGIES:
        raise ValueError(f"distributed.strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    ranks = ranks or Ranks(dist.get_rank(), dist.get_world_size())
    if not ranks.distributed:
        return model.to(ranks.device)
    if ranks.is_main and source is None:
        source = copy.deepcopy(model)
    if not on_meta(model):
        model.to(ranks.device)
    if strategy == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(ranks.device.type, (ranks.world_size,))
        for layer in decoder_layers(model):
            # each layer is its own FSDP root (nothing above it is wrapped), and a root keeps its
            # weights gathered after its forward unless told otherwise: free them until the backward
            fully_shard(layer, mesh=mesh, reshard_after_forward=True)
    materialize(model, ranks.device)
    take_from_main(model, source, ranks)
    return model


def on_meta(module: torch.nn.Module) -> bool:
    """Whether module was built on the meta device (any of its tensors without data)."""
    return any(t.is_meta for t in [*module.parameters(), *module.buffers()])


def materialize(module: torch.nn.Module, device: torch.device) -> None:
    """A module built on the meta device given (uninitialised) storage on device, each shard of
    a sharded one only; tied weights stay one tensor (the parameters are swapped in place, not
    replaced). Anything else: untouched."""
    if not on_meta(module):
        return
    swapping = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        module.to_empty(device=device)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swapping)


def take_from_main(module: torch.nn.Module, source: torch.nn.Module | None, ranks: Ranks) -> None:
    """Every rank's module (whole, or its shards) takes the values of source, rank 0's whole
    module with the same names (None on the other ranks): each parameter and buffer (those
    a checkpoint leaves out too, such as rotary frequencies) broadcast whole, one at a time, and
    cut to each rank's shard. Collective."""
    theirs = dict([*source.named_parameters(), *source.named_buffers()]) if ranks.is_main else {}
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            full = (theirs[name].detach().to(ranks.device, tensor.dtype).contiguous() if ranks.is_main
                    else torch.empty(tensor.shape, dtype=tensor.dtype, device=ranks.device))
            dist.broadcast(full, src=0)
            local_copy(tensor, full)


def local_copy(target: torch.Tensor, full: torch.Tensor) -> None:
    """target (a whole tensor, or this rank's shard of one) takes its part of the whole tensor full."""
    if is_sharded(target):
        target.to_local().copy_(slice_like(full.to(target.dtype), target).to_local())
    else:
        target.copy_(full.to(target.device, target.dtype))


def same_as_main(module: torch.nn.Module, ranks: Ranks) -> None:
    """A whole (unsharded) module on every rank with rank 0's values (another rank's may be built
    on the meta device: a frozen copy of a policy that rank 0 alone loaded). Collective; on one
    process nothing happens."""
    if not ranks.distributed:
        return
    materialize(module, ranks.device)
    take_from_main(module, module if ranks.is_main else None, ranks)
