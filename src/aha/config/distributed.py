"""The `distributed` section (learner ranks on torch.distributed: FSDP2 or DDP over N processes)
and what N ranks do not run yet, refused when the config is read rather than after minutes."""

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


def distributed_problems(config, world_size: int | None = None) -> list[str]:
    """What config asks of N ranks that they do not run yet (N: distributed.processes, or the
    world size torchrun started)."""
    if config.distributed.processes > 1 and config.ray.learner_workers > 1:
        return ["distributed.processes and ray.learner_workers both start learner ranks (torchrun's processes, "
                "Ray actors): set one of them"]
    n = world_size or max(config.distributed.processes, config.ray.learner_workers)
    if n <= 1:
        return []
    where = (f"{n} learner ranks (torchrun's world size)" if world_size is not None
             else f"distributed.processes={n}" if config.distributed.processes > 1 else f"ray.learner_workers={n}")
    unsupported = {
        # a reset copies the policy into rank 0's reference mid-step, from weights only gathered after it
        "algorithm.ref_reset_every / ref_reset_kl": config.method == "rl" and bool(
            config.algorithm.ref_reset_every or config.algorithm.ref_reset_kl),
        # bco_pair's reward shift is a running mean over the micro-batches in order: each rank sees its part
        "dpo.loss=bco_pair": config.method == "dpo" and config.dpo.loss == "bco_pair",
    }
    named = [key for key, used in unsupported.items() if used]
    return [f"{where} does not run {', '.join(named)} yet: set distributed.processes=1 for it"] if named else []
