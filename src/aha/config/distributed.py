"""The `distributed` section (learner ranks on torch.distributed: FSDP2 or DDP over N processes)
and what cannot be asked of them, refused when the config is read rather than after minutes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from aha.config.sections import Strict


class DistributedConfig(Strict):
    """The learner over several processes: each rank trains its share of every step's global
    batch and the N ranks take the step one process takes. Rank 0 owns the run folder, samples,
    scores and evaluates; its checkpoints load on any number of ranks."""

    processes: int = Field(1, ge=1, description="learner ranks on this machine: aha train starts N processes with "
                                                "torchrun itself. Under a torchrun you start (several machines), "
                                                "torchrun's world size is used: leave this at 1 or set it to that size")
    strategy: Literal["fsdp2", "ddp"] = Field("fsdp2", description="fsdp2: each decoder layer sharded over the ranks "
                                              "(fully_shard: 1/N of its weights, gradients and optimizer state per "
                                              "rank), embeddings and head whole on each; ddp: the whole model on "
                                              "each rank, gradients averaged by all-reduce")
    timeout_s: float = Field(1800.0, gt=0, description="how long a rank waits in a collective for a peer before the "
                                                       "run stops: longer than rank 0's longest work alone (sampling "
                                                       "a step, a held-out evaluation, a checkpoint), while the "
                                                       "others wait")


def distributed_problems(config) -> list[str]:
    """What config asks of the learner ranks that they cannot run (every method and option runs
    on N ranks: what is left is asking for two sets of ranks at once)."""
    if config.distributed.processes > 1 and config.ray.learner_workers > 1:
        return ["distributed.processes and ray.learner_workers both start learner ranks (torchrun's processes, "
                "Ray actors): set one of them"]
    return []
