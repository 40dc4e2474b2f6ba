"""A few optimizer steps of the tiny model on one fixed global batch, as one process or as the
ranks torchrun starts (`torchrun --nproc_per_node 2 tests/distributed_step.py OUT fsdp2`): each
rank trains its share of the rows with its summed token loss scaled to the global token mean
(aha.training.distributed). Rank 0 writes the per-step global losses and the final weights,
gathered whole, to OUT; tests/test_distributed.py compares them across world sizes.
--load DIR starts from a saved training state, --save DIR saves one after the last step: the
weights and AdamW's moments gathered whole, as aha's checkpoints hold them (training/shards.py)."""

import argparse
import json
import os
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from aha.models.loading import model_on_meta
from aha.models.tiny import tiny_model
from aha.training.distributed import (
    clip_gradients,
    close_ranks,
    global_sum,
    init_ranks,
    rank_rows,
    reduce_gradients,
    shared,
    token_mean_scale,
)
from aha.training.placement import on_meta
from aha.training.shards import Shards, full_optimizer_state, load_optimizer_state

STEPS, ROWS, LENGTH, VOCAB = 3, 6, 12, 100


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and a loss mask with a different number of trained tokens in each row, so a
    per-rank mean would weigh rows differently from the global token mean."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, VOCAB, (ROWS, LENGTH), generator=generator)
    mask = torch.zeros(ROWS, LENGTH)
    for row in range(ROWS):
        mask[row, 2 + row:] = 1.0
    return ids, mask


def main(out: Path, strategy: str, steps: int = STEPS, load: Path | None = None, save: Path | None = None,
         die: tuple[int, int] | None = None) -> None:
    torch.use_deterministic_algorithms(True)
    ranks = init_ranks("cpu")
    shards = Shards(ranks, strategy)  # as aha train places a model: rank 0 keeps a whole copy beside the shards
    # as aha train loads it: rank 0 alone holds the weights, the other ranks the architecture on the meta device
    model = tiny_model(VOCAB, seed=0).float() if ranks.is_main else model_on_meta(*shared(None, ranks))
    if ranks.is_main and ranks.distributed:
        shared((model.config, model.generation_config), ranks)
    model = shards.place("model", model)
    assert not on_meta(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # aha's optimizer, a tiny-model rate
    if load is not None:  # as a resume does: rank 0 reads the file, every rank takes its part
        saved = torch.load(load / "state.pt", weights_only=False) if ranks.is_main else None
        if ranks.is_main:
            shards.whole("model").load_state_dict(saved["model"])
        shards.push()
        load_optimizer_state(optimizer, saved["optimizer"] if ranks.is_main else None, ranks)
    ids, mask = batch()
    mine = rank_rows(ROWS, ranks)
    global_tokens = global_sum(float(mask[:, 1:].sum()), ranks) / ranks.world_size  # every rank sees the whole mask
    losses, grad_norms = [], []
    for step in range(1, steps + 1):
        if die is not None and (ranks.rank, step) == die:  # a rank lost mid-run (a crash, an OOM kill)
            print(f"rank {ranks.rank}: dying at step {step}", file=sys.stderr, flush=True)
            os._exit(3)
        # as the learner does: the backbone's forward, then the head's weight read directly
        hidden = model.base_model(input_ids=ids[mine]).last_hidden_state[:, :-1]
        logits = (hidden @ model.get_output_embeddings().weight.T).float()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[mine][:, 1:].reshape(-1),
                                                reduction="none").view(logits.shape[:2])
        summed = (nll * mask[mine][:, 1:]).sum()
        (summed * token_mean_scale(global_tokens, ranks)).backward()
        reduce_gradients(model.parameters(), ranks)
        grad_norms.append(clip_gradients(model.parameters(), float("inf"), ranks))  # AdamW would hide a wrong scale
        optimizer.step()
        optimizer.zero_grad()
        losses.append(global_sum(float(summed.detach()), ranks) / global_tokens)
    shards.refresh()  # rank 0's whole copy takes the trained weights
    moments = full_optimizer_state(optimizer, ranks)  # as a checkpoint saves them: gathered whole on rank 0
    if ranks.is_main:
        weights = shards.whole("model").state_dict()
        if save is not None:
            save.mkdir(parents=True, exist_ok=True)
            torch.save({"model": weights, "optimizer": moments}, save / "state.pt")
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.clone().contiguous() for k, v in weights.items()}, str(out / "weights.safetensors"))
        (out / "losses.json").write_text(json.dumps({"world_size": ranks.world_size, "rows": [mine.start, mine.stop],
                                                     "losses": losses, "grad_norms": grad_norms}))
    close_ranks(ranks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("strategy", nargs="?", default="fsdp2")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--load", type=Path)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--die", type=int, nargs=2, metavar=("RANK", "STEP"), help="that rank exits at that step")
    args = parser.parse_args()
    main(args.out, args.strategy, args.steps, args.load, args.save, tuple(args.die) if args.die else None)
