"""The optimizer, built in one place for every method, and the one optimizer step they all take:
gradients accumulated over micro-batches, clipped, and applied unless they are not finite."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence

import torch

from aha.config import TrainConfig
from aha.training.distributed import (
    Ranks,
    clip_gradients,
    global_sum,
    interleaved,
    rank_passes,
    reduce_gradients,
    scaled_backward,
)

log = logging.getLogger(__name__)


def build_optimizer(parameters: Iterable[torch.nn.Parameter], train: TrainConfig, lr: float | None = None
                    ) -> torch.optim.AdamW:
    """AdamW over `parameters` with train.betas and train.weight_decay, at train.lr unless `lr`
    is given (the critic's own learning rate)."""
    return torch.optim.AdamW(parameters, lr=train.lr if lr is None else lr, betas=train.betas,
                             weight_decay=train.weight_decay)


def guarded_step(optimizer: torch.optim.Optimizer, name: str, loss: float, grad_norm: float) -> int:
    """optimizer.step() unless the loss or the gradient norm is NaN or inf: then the gradients
    are dropped and the weights (and the optimizer's moments) stay exactly as they were.
    Returns 1 if the step was skipped."""
    if math.isfinite(loss) and math.isfinite(grad_norm):
        optimizer.step()
        return 0
    optimizer.zero_grad(set_to_none=True)
    log.warning("skipped a %s optimizer step: loss %s, gradient norm %s (the weights are unchanged)",
                name, loss, grad_norm)
    return 1


def accumulated_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, groups: Sequence,
                     loss_of: Callable[..., torch.Tensor | tuple[torch.Tensor, object]], max_grad_norm: float,
                     ranks: Ranks = Ranks(), with_factor: bool = False) -> dict:
    """One optimizer step whose gradient is accumulated over micro-batches: loss_of(group)
    returns that group's share of the batch loss (already divided by the batch's normaliser),
    so the step equals one on the whole batch, or (loss, result) to have each group's result
    back, in the groups' order, as "results". A NaN/inf loss or gradient skips the update.
    With several learner ranks each rank takes its part of every group (rank_passes) and the
    losses, results and gradients are those of all of them. with_factor: loss_of(group, factor)
    is told each pass's factor (0: a repeated pass, whose numbers count nowhere)."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total, results, with_results = 0.0, [], False
    for group, factor in rank_passes(list(groups), ranks):
        out = loss_of(group, factor) if with_factor else loss_of(group)
        with_results = isinstance(out, tuple)
        loss, result = out if with_results else (out, None)
        scaled_backward(loss, factor)
        if factor:  # a repeated pass (factor 0) only meets the other ranks' collectives
            total += float(loss.detach())
        results.append(result if factor else None)
    total = global_sum(total, ranks)
    reduce_gradients(model.parameters(), ranks)
    grad_norm = clip_gradients(model.parameters(), max_grad_norm, ranks)
    skipped = guarded_step(optimizer, "policy", total, grad_norm)
    model.eval()
    update = {"loss/total": total, "grad_norm": grad_norm, "train/skipped_updates": skipped}
    return {**update, "results": interleaved(results, ranks)} if with_results else update
