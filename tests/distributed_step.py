"""A few optimizer steps of the tiny model on one fixed global batch, as one process or as the
ranks torchrun starts (`torchrun --nproc_per_node 2 tests/distributed_step.py OUT fsdp2`): each
rank trains its share of the rows with its summed token loss scaled to the global token mean
(aha.training.distributed). Rank 0 writes the per-step global losses and the final weights,
gathered whole, to OUT; tests/test_distributed.py compares them across world sizes."""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from aha.models.tiny import tiny_model
from aha.training.distributed import full_state_dict, global_sum, init_ranks, rank_rows, shard, token_mean_scale

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


def main(out: Path, strategy: str) -> None:
    torch.use_deterministic_algorithms(True)
    ranks = init_ranks("cpu")
    model = tiny_model(VOCAB, seed=0).float()
    model = shard(model, strategy) if ranks.distributed else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)  # aha's optimizer, a tiny-model rate
    ids, mask = batch()
    mine = rank_rows(ROWS, ranks)
    global_tokens = global_sum(float(mask[:, 1:].sum()), ranks) / ranks.world_size  # every rank sees the whole mask
    losses = []
    for _ in range(STEPS):
        logits = model(input_ids=ids[mine]).logits[:, :-1].float()
        nll = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[mine][:, 1:].reshape(-1),
                                                reduction="none").view(logits.shape[:2])
        summed = (nll * mask[mine][:, 1:]).sum()
        (summed * token_mean_scale(global_tokens, ranks)).backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(global_sum(float(summed.detach()), ranks) / global_tokens)
    weights = full_state_dict(model, ranks)
    if ranks.is_main:
        out.mkdir(parents=True, exist_ok=True)
        save_file({k: v.clone().contiguous() for k, v in weights.items()}, str(out / "weights.safetensors"))
        (out / "losses.json").write_text(json.dumps({"world_size": ranks.world_size, "rows": [mine.start, mine.stop],
                                                     "losses": losses}))
    if ranks.distributed:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "fsdp2")
