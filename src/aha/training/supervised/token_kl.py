"""TDPO's inputs for a micro-batch of sequences: the policy's and the reference's summed
log-probs of each completion, and the sequential KL, the sum over the completion's positions
of KL(ref || pi) over the whole vocabulary.

The KL needs both models' full next-token distributions at every completion position, so
the cached per-sequence sums of the other losses are not enough: the reference runs beside
the policy on each micro-batch. Only completion positions get logits, as (M, V) rows for the
M completion tokens of this micro-batch (never (N, T, V) for the batch): with SmolLM2's
49152-token vocabulary, 4 MB of fp32 per 20 tokens and per tensor, of which the backward
keeps about three."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aha.algorithms import token_kl
from aha.models.compute import autocast, full_precision, on_device, plain_head
from aha.training.logprobs import completion_hidden
from aha.training.supervised.sequences import Sequence, pad


def _head_logits(model, hidden: torch.Tensor) -> torch.Tensor:
    """The LM head on (M, H) hidden states, in fp32 (as the rest of the learner's log-probs:
    bf16 logits move in steps of 0.125 at 20), with autograd."""
    head = plain_head(model)
    if head is None:  # a head with its own forward: run it as it is
        return model.get_output_embeddings()(hidden).float()
    with full_precision(hidden.device):
        bias = None if head.bias is None else head.bias.float()
        return F.linear(hidden.float(), head.weight.float(), bias)


def _completion_logprobs(model, batch: tuple[torch.Tensor, ...], dtype: torch.dtype) -> torch.Tensor:
    """(M, V) log-softmax of the model's next-token distribution at each completion position."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = batch
    with autocast(dtype, model.device):
        hidden = completion_hidden(model.base_model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    return torch.log_softmax(_head_logits(model, hidden[completion_mask.bool()]), dim=-1)


def logps_and_token_kl(model, ref_model, sequences: list[Sequence], pad_id: int,
                       dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per sequence (N,): summed log pi of its completion (with gradient), summed log ref,
    and its sequential KL(ref || pi) (with gradient through pi), on the CPU; the (M, V)
    log-probs stay on the models' device."""
    batch = on_device(model.device, *pad(sequences, pad_id))
    completion_ids, completion_mask = batch[2], batch[3]
    keep = completion_mask.bool()
    targets = completion_ids[keep][:, None]
    # the sequence of each row
    owner = torch.arange(len(sequences), device=keep.device).repeat_interleave(keep.sum(dim=1))

    def per_sequence(rows: torch.Tensor) -> torch.Tensor:
        return rows.new_zeros(len(sequences)).index_add(0, owner, rows)

    with torch.no_grad():
        ref_logprobs = _completion_logprobs(ref_model, batch, dtype)
    policy_logprobs = _completion_logprobs(model, batch, dtype)
    logps = per_sequence(policy_logprobs.gather(1, targets).squeeze(1))
    ref_logps = per_sequence(ref_logprobs.gather(1, targets).squeeze(1))
    return on_device(torch.device("cpu"), logps, ref_logps, per_sequence(token_kl(ref_logprobs, policy_logprobs)))
