"""What the learner ranks train and what rank 0 keeps whole: each trained module is placed over
the ranks (training/placement.py: FSDP2 shards or whole copies), and rank 0 keeps a whole copy
of it beside the shards, refreshed after every step. Rank 0's copies are what the sampling
engine samples from, what rank-0-only work reads (RL's rollouts, scores and log-probs, held-out
evaluation) and what checkpoints save, in the format one process writes: a run saved by N
ranks resumes on any number. On one process there is no copy: the trained module is its own.

Collective calls (refresh, push, full_optimizer_state, load_optimizer_state, broadcast_state)
must be made by every rank in the same order."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from aha.training.distributed import Ranks, is_sharded, slice_like, whole_tensor
from aha.training.placement import place, take_from_main


@dataclass
class Shards:
    """The trained modules by name, each with rank 0's whole copy (None on the other ranks)."""

    ranks: Ranks = field(default_factory=Ranks)
    strategy: str = "fsdp2"
    pairs: dict[str, tuple[torch.nn.Module, torch.nn.Module | None]] = field(default_factory=dict)

    def place(self, name: str, module: torch.nn.Module, whole: torch.nn.Module | None = None) -> torch.nn.Module:
        """module spread over the ranks, in place, every rank taking the values of rank 0's
        `whole` (a copy made here when not given), which rank 0 keeps; on the other ranks module
        may be built on the meta device. On one process: module itself, untouched."""
        if not self.ranks.distributed:
            self.pairs[name] = (module, module)
            return module
        if self.ranks.is_main and whole is None:
            whole = copy.deepcopy(module)  # before sharding: a sharded module cannot be copied
        whole = whole if self.ranks.is_main else None
        self.pairs[name] = (place(module, self.strategy, self.ranks, source=whole), whole)
        return module

    def whole(self, name: str) -> torch.nn.Module | None:
        """Rank 0's whole copy of a trained module (the module itself on one process)."""
        return self.pairs[name][1]

    def refresh(self) -> None:
        """Rank 0's whole copies take the trained modules' new weights (gathered from the
        shards): after every optimizer step, before anything samples or saves."""
        if not self.ranks.distributed:
            return
        for trained, whole in self.pairs.values():
            full = gather_state(trained, self.ranks)
            if whole is not None:
                whole.load_state_dict(full)

    def push(self) -> None:
        """Every rank's trained modules take rank 0's whole copies' weights (a resume loads
        a checkpoint into rank 0's copies, then pushes), one tensor at a time, as at placement."""
        if not self.ranks.distributed:
            return
        for trained, whole in self.pairs.values():
            take_from_main(trained, whole, self.ranks)


def gather_state(module: torch.nn.Module, ranks: Ranks) -> dict[str, torch.Tensor]:
    """module's state with every shard gathered whole, on rank 0 (collective; the other ranks
    take part and get an empty dict)."""
    full = {}
    for key, value in module.state_dict().items():
        value = whole_tensor(value)
        if ranks.is_main:
            full[key] = value.detach().cpu()
    return full


def full_optimizer_state(optimizer: torch.optim.Optimizer, ranks: Ranks) -> dict | None:
    """optimizer.state_dict() with every sharded moment gathered whole: on rank 0, exactly what
    one process's optimizer would return (None on the other ranks). Collective."""
    state = optimizer.state_dict()
    if not ranks.distributed:
        return state
    whole = {}
    for index, entry in state["state"].items():
        gathered = {key: whole_tensor(value) for key, value in entry.items()}
        if ranks.is_main:  # the others take part in each all-gather and let the whole tensors go
            whole[index] = gathered
    return {"state": whole, "param_groups": state["param_groups"]} if ranks.is_main else None


def load_optimizer_state(optimizer: torch.optim.Optimizer, full: dict | None, ranks: Ranks) -> None:
    """What full_optimizer_state gathered (or one process saved), given on rank 0, into every
    rank's optimizer: each rank keeps its own slice of each sharded moment. Collective."""
    if not ranks.distributed:
        optimizer.load_state_dict(full)
        return
    full = broadcast_state(full, ranks)
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    local = {}
    for index, entry in full["state"].items():
        target = parameters[index]
        local[index] = {key: _like(target, value) for key, value in entry.items()}
    optimizer.load_state_dict({"state": local, "param_groups": full["param_groups"]})


def _like(parameter: torch.Tensor, value):
    """A moment shaped like its parameter (this rank's shard of it where the parameter is
    sharded); scalars such as AdamW's step count as they are."""
    if not torch.is_tensor(value) or value.shape != parameter.shape or not is_sharded(parameter):
        return value
    return slice_like(value, parameter)


def broadcast_state(state, ranks: Ranks):
    """Rank 0's nested state (dicts and lists of tensors and plain values) on every rank: the
    layout travels pickled, each tensor by a broadcast of its own (large tensors are not
    pickled). Collective."""
    tensors: list[torch.Tensor] = []

    def strip(value):
        if torch.is_tensor(value):
            tensors.append(value)
            return _Slot(len(tensors) - 1, tuple(value.shape), value.dtype)
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(strip(v) for v in value)
        return value

    layout = [strip(state) if ranks.is_main else None]
    dist.broadcast_object_list(layout, src=0)
    received: list[torch.Tensor] = []

    def fill(value):
        if isinstance(value, _Slot):
            return received[value.index]
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(fill(v) for v in value)
        return value

    for slot in _slots(layout[0]):
        buffer = (tensors[slot.index].detach().to(ranks.device).contiguous() if ranks.is_main
                  else torch.empty(slot.shape, dtype=slot.dtype, device=ranks.device))
        dist.broadcast(buffer, src=0)
        received.append(buffer.cpu())
    return fill(layout[0])


@dataclass(frozen=True)
class _Slot:
    index: int
    shape: tuple
    dtype: torch.dtype


def _slots(value) -> list[_Slot]:
    if isinstance(value, _Slot):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _slots(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _slots(v)]
    return []
