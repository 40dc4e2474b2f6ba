"""The optimizer, built in one place for every method, and the one optimizer step they all take:
gradients accumulated over micro-batches, clipped, and applied unless they are not finite."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence

import torch

from aha.config import TrainConfig

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
                     loss_of: Callable[[object], torch.Tensor], max_grad_norm: float) -> dict:
    """One optimizer step whose gradient is accumulated over micro-batches: loss_of(group)
    returns that group's share of the batch loss (already divided by the batch's normaliser),
    so the step equals one on the whole batch. A NaN/inf loss or gradient skips the update."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for group in groups:
        loss = loss_of(group)
        loss.backward()
        total += float(loss.detach())
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
    skipped = guarded_step(optimizer, "policy", total, grad_norm)
    model.eval()
    return {"loss/total": total, "grad_norm": grad_norm, "train/skipped_updates": skipped}
