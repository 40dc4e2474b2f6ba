"""What one learner rank holds with FSDP2 against one process, on the embedded model (issue 32).

    .venv/bin/python bench/fsdp_memory.py                                     # one process
    .venv/bin/torchrun --standalone --nproc_per_node 2 bench/fsdp_memory.py    # two CPU ranks

Rank 0 loads SmolLM2-135M (fp32) and the other ranks build its architecture on the meta device, as
`aha train` does; the model is placed over the ranks when torchrun started several
(aha.training.placement.place: every decoder layer sharded by FSDP2, embeddings, final norm and
the tied head whole on each rank, their gradients all-reduced; every rank takes rank 0's values,
one tensor at a time), and takes --steps
AdamW steps on --rows x --tokens random tokens split across the ranks (token-mean loss over the
global batch). Rank 0 prints, for each rank: the bytes of parameters, gradients and AdamW
moments it holds (its shards: counted exactly from the local tensors), its peak resident memory
(ru_maxrss: rank 0's includes the whole model it loads and the copy it places from), and the step
time. On a 2-core machine two ranks share the two cores:
the times show correctness costs, not speed."""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch
import torch.distributed as dist

from aha.models import load
from aha.models.loading import model_on_meta
from aha.training.distributed import (
    close_ranks,
    global_sum,
    init_ranks,
    rank_rows,
    reduce_gradients,
    shared,
    token_mean_scale,
)
from aha.training.placement import place


def local_bytes(tensors) -> int:
    """Bytes of this rank's part of each tensor (a DTensor's local shard, else the tensor)."""
    total = 0
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    ranks = init_ranks("cpu")
    if ranks.is_main:  # rank 0 loads the weights; the others build the architecture on the meta device
        model = load("smollm2-135m").model.float().train()
        shared((model.config, model.generation_config), ranks)
    else:
        model = model_on_meta(*shared(None, ranks)).train()
    model = place(model, "fsdp2", ranks)  # rank 0 copies its model whole first: the values every rank takes
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (args.rows, args.tokens), generator=torch.Generator().manual_seed(0))
    mine = rank_rows(args.rows, ranks)
    global_tokens = args.rows * (args.tokens - 1)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        logits = model(input_ids=ids[mine]).logits[:, :-1].float()
        summed = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), ids[mine][:, 1:].reshape(-1),
                                                   reduction="sum")
        (summed * token_mean_scale(global_tokens, ranks)).backward()
        reduce_gradients(model.parameters(), ranks)
        grads = local_bytes(p.grad for p in model.parameters())
        optimizer.step()
        optimizer.zero_grad()
        global_sum(0.0, ranks)  # every rank ends the step together
        times.append(time.perf_counter() - start)
    params = local_bytes(model.parameters())
    moments = local_bytes(v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v))
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux reports KiB
    mine_report = {"rank": ranks.rank, "params_mib": params / 2**20, "grads_mib": grads / 2**20,
                   "adam_mib": moments / 2**20, "peak_rss_mib": peak_kib / 1024, "step_s": times[-1]}
    reports = [None] * ranks.world_size
    if ranks.distributed:
        dist.all_gather_object(reports, mine_report)
    else:
        reports = [mine_report]
    if ranks.is_main:
        print(json.dumps({"world_size": ranks.world_size, "rows": args.rows, "tokens": args.tokens, "ranks": reports},
                         indent=1))
    close_ranks(ranks)


if __name__ == "__main__":
    main()
