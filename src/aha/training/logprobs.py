"""The learner's view of a rollout: hidden states at the positions that predict completion
tokens, and from them per-token log-probs, entropies (policy) or values (critic)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aha.algorithms import entropy_from_logits
from aha.models.compute import (
    FP32Head,
    attention_for,
    attention_scores,
    full_precision,
    on_device,
    plain_head,
    positions_from_mask,
)


def completion_hidden(backbone, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                      completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """(N, T, H) last hidden states at the positions that predict completion_t (the prompt's
    last token, then completion tokens 0..T-2), on the backbone's device. No LM head runs on
    prompt positions."""
    prompt_ids, prompt_mask, completion_ids, completion_mask = on_device(
        backbone.device, prompt_ids, prompt_mask, completion_ids, completion_mask)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    with attention_for(backbone, attention_scores(backbone.config, *input_ids.shape, input_ids.shape[1])):
        hidden = backbone(input_ids=input_ids, attention_mask=attention, position_ids=positions_from_mask(attention),
                          use_cache=False).last_hidden_state
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    return hidden[:, P - 1:P + T - 1]


def grouped_completion_hidden(backbone, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                              completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                              group_size: int) -> torch.Tensor:
    """Same result as completion_hidden for rows that come in groups of group_size sharing
    one prompt, but the prompt is run once per group instead of once per row.

    The prompt's KV cache is repeated G times (a differentiable copy, so its gradient is
    the sum over the group's completions, as in the unshared computation). For GRPO with
    long prompts and short answers this removes most of the learner's compute.
    prompt_ids / prompt_mask: (N/G, P), one row per group; completions: (N, T)."""
    G = group_size
    N, T, P = completion_ids.shape[0], completion_ids.shape[1], prompt_ids.shape[1]
    with attention_for(backbone, max(attention_scores(backbone.config, N // G, P, P),
                                     attention_scores(backbone.config, N, T - 1, P + T - 1))):
        return _grouped_completion_hidden(backbone, prompt_ids, prompt_mask, completion_ids, completion_mask, G)


def _grouped_completion_hidden(backbone, prompt_ids, prompt_mask, completion_ids, completion_mask, G: int):
    from transformers import DynamicCache

    prompt_ids, prompt_mask, completion_ids, completion_mask = on_device(
        backbone.device, prompt_ids, prompt_mask, completion_ids, completion_mask)
    cache = DynamicCache(config=backbone.config)
    prompt_out = backbone(input_ids=prompt_ids, attention_mask=prompt_mask.long(),
                          position_ids=positions_from_mask(prompt_mask.long()), past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(G)
    last_prompt_hidden = prompt_out.last_hidden_state[:, -1:].repeat_interleave(G, dim=0)
    if completion_ids.shape[1] == 1:
        return last_prompt_hidden
    # the last completion token predicts nothing we score: feed tokens 0..T-2
    attention = torch.cat([prompt_mask.long().repeat_interleave(G, dim=0), completion_mask[:, :-1].long()], dim=1)
    positions = positions_from_mask(attention)[:, prompt_ids.shape[1]:]
    out = backbone(input_ids=completion_ids[:, :-1], attention_mask=attention, position_ids=positions,
                   past_key_values=cache, use_cache=True)
    return torch.cat([last_prompt_hidden, out.last_hidden_state], dim=1)


def groups_share_prompts(prompt_ids: torch.Tensor, group_size: int) -> bool:
    """Whether each run of group_size rows has one prompt (left-padded alike)."""
    grouped = prompt_ids.view(-1, group_size, prompt_ids.shape[1])
    return bool((grouped == grouped[:, :1]).all())


def rollout_hidden(backbone, ro, rows: slice, width: int, group_size: int, share_prompt: bool) -> torch.Tensor:
    """Hidden states for rows of a Rollouts (completions cut to width columns). With
    share_prompt the rows must be whole groups, each group's prompt run once."""
    # the attention covers the environment's tokens of a multi-turn episode too
    completion, mask = ro.completion_ids[rows, :width], ro.sequence_mask()[rows, :width]
    if share_prompt and not groups_share_prompts(ro.prompt_ids[rows], group_size):
        share_prompt = False  # e.g. an environment whose first prompt differs between a group's episodes
    if share_prompt:
        return grouped_completion_hidden(backbone, ro.prompt_ids[rows][::group_size],
                                         ro.prompt_mask[rows][::group_size],
                                         completion, mask, group_size)
    return completion_hidden(backbone, ro.prompt_ids[rows], ro.prompt_mask[rows], completion, mask)


@dataclass
class TokenStats:
    logprobs: torch.Tensor  # (N, T) log pi(token), 0 on padding
    entropy: torch.Tensor | None  # (N, T) entropy of pi at each position, 0 on padding


# Rows of the LM head's (M, V) logits that the element-wise passes (logsumexp, gather,
# softmax, entropy, gradient) take at a time: 64 rows of a 49k-token vocabulary are 12 MB of
# fp32, small enough to stay in cache through all of them, where passes over the whole
# tensor (hundreds of MB) each went to memory.
HEAD_CHUNK_ROWS = 64


class _HeadStats(torch.autograd.Function):
    """Per row: log softmax(z)[target] and the entropy of softmax(z), z = (h W^T + b) / T.

    The logits are one fp32 matmul, kept for the backward (as autograd would keep them);
    everything element-wise runs HEAD_CHUNK_ROWS rows at a time, and the backward's two
    matmuls (into h and into W) run in grad_dtype (bf16 where the model computes in bf16, as
    autocast runs every other layer's backward). d logp/dz = onehot(target) - p and
    d H/dz = -p (log p + H). Called with autocast off and fp32 inputs (token_stats), as
    torch.amp.custom_fwd(cast_inputs=float32) would, for whichever device they are on."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, inv_temp: float, grad_dtype: torch.dtype):
        scale = inv_temp[:, None] if isinstance(inv_temp, torch.Tensor) else inv_temp  # one a row: per-row temperatures
        z = FP32Head(weight, bias)(hidden).mul_(scale)
        M = z.shape[0]
        logp, ent, lse = (z.new_empty(M) for _ in range(3))
        for s in range(0, M, HEAD_CHUNK_ROWS):
            rows = slice(s, s + HEAD_CHUNK_ROWS)
            lse[rows] = z[rows].logsumexp(dim=1)
            logp[rows] = z[rows].gather(1, targets[rows, None]).squeeze(1) - lse[rows]
            log_p = z[rows] - lse[rows, None]
            ent[rows] = -(log_p.exp() * log_p).sum(dim=1)
        ctx.save_for_backward(hidden, weight, bias, targets, z, lse, ent)
        ctx.inv_temp, ctx.grad_dtype = inv_temp, grad_dtype
        ctx.set_materialize_grads(False)  # an unused output (entropy) gets None, not zeros to multiply
        return logp, ent

    @staticmethod
    def backward(ctx, grad_logp, grad_ent):
        hidden, weight, bias, targets, z, lse, ent = ctx.saved_tensors
        g = torch.empty(z.shape, dtype=ctx.grad_dtype, device=z.device)  # dL/dz * inv_temp, one chunk at a time
        for s in range(0, z.shape[0], HEAD_CHUNK_ROWS):
            rows = slice(s, s + HEAD_CHUNK_ROWS)
            log_p = z[rows] - lse[rows, None]
            p = log_p.exp()
            if grad_ent is None:  # only the log-probs are differentiated
                chunk = p.mul_(-grad_logp[rows, None])
            else:
                chunk = log_p.add_(ent[rows, None]).mul_(p).mul_(-grad_ent[rows, None])
                if grad_logp is not None:
                    chunk.sub_(p.mul_(grad_logp[rows, None]))
            if grad_logp is not None:
                chunk[torch.arange(chunk.shape[0], device=z.device), targets[rows]] += grad_logp[rows]
            g[rows] = chunk.mul_(ctx.inv_temp[rows, None] if isinstance(ctx.inv_temp, torch.Tensor) else ctx.inv_temp)
        grad_h = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_h = (g @ weight.to(ctx.grad_dtype)).to(hidden.dtype)
        if ctx.needs_input_grad[1]:
            grad_w = (g.t() @ hidden.to(ctx.grad_dtype)).to(weight.dtype)
        if bias is not None and ctx.needs_input_grad[2]:
            grad_b = g.float().sum(dim=0).to(bias.dtype)
        return grad_h, grad_w, grad_b, None, None, None


def token_stats(model, hidden: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor,
                temperature: float | torch.Tensor, entropy: str = "none",
                grad_dtype: torch.dtype | None = None) -> TokenStats:
    """Log-probs of targets under the LM head at the sampling temperature (one for all rows,
    or an (N,) tensor: each row's own); entropy "none" | "detached" (for logging) | "grad"
    (for an entropy bonus).

    The head runs in fp32 on the masked positions only (see _HeadStats); with grad_dtype
    bf16 its backward's matmuls run in bf16 (None: bf16 when called under bf16 autocast).
    hidden is on the model's device; the results come back on the device of mask (the CPU,
    where the rollouts are), still differentiable."""
    device, home = hidden.device, mask.device
    if grad_dtype is None:
        under = torch.amp.is_autocast_available(device.type) and torch.is_autocast_enabled(device.type)
        grad_dtype = torch.get_autocast_dtype(device.type) if under else torch.float32
    targets, mask = on_device(device, targets, mask)
    if isinstance(temperature, torch.Tensor):
        temperature = temperature.to(device)
    head = plain_head(model)
    if head is None:  # a head with its own forward: run it as it is
        per_row = temperature.view(-1, 1, 1) if isinstance(temperature, torch.Tensor) else temperature
        stats = _token_stats_reference(model.get_output_embeddings()(hidden).float() / per_row, targets, mask, entropy)
        return TokenStats(*on_device(home, stats.logprobs, stats.entropy))
    keep = mask.bool()
    inv_temp = (1.0 / temperature.float()).view(-1, 1).expand(mask.shape)[keep] \
        if isinstance(temperature, torch.Tensor) else 1.0 / temperature
    with full_precision(device):  # fp32 inside autocast too (what custom_fwd(cast_inputs=float32) does)
        floats = [None if t is None else t.float() for t in (hidden[keep], head.weight, head.bias)]
        logp, ent = _HeadStats.apply(*floats, targets[keep], inv_temp, grad_dtype)
    logprobs = hidden.new_zeros(mask.shape, dtype=torch.float32).masked_scatter(keep, logp)
    if entropy == "none":
        return TokenStats(on_device(home, logprobs), None)
    if entropy == "detached":
        ent = ent.detach()
    entropies = hidden.new_zeros(mask.shape, dtype=torch.float32).masked_scatter(keep, ent)
    return TokenStats(*on_device(home, logprobs, entropies))


def _token_stats_reference(logits: torch.Tensor, targets, mask, entropy: str) -> TokenStats:
    """The plain computation over full (N, T, V) logits: the definition the chunked head is
    tested against, and the path for heads that are not a plain Linear."""
    picked = logits.gather(2, targets.unsqueeze(2)).squeeze(2)
    logprobs = (picked - torch.logsumexp(logits, dim=2)) * mask
    ent = None
    if entropy == "grad":
        ent = entropy_from_logits(logits) * mask
    elif entropy == "detached":
        with torch.no_grad():
            ent = entropy_from_logits(logits.detach()) * mask
    return TokenStats(logprobs, ent)


def completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature: float = 1.0):
    """(N, T) log pi(completion_t | prompt, completion_<t), at the sampling temperature."""
    hidden = completion_hidden(model.base_model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    return token_stats(model, hidden, completion_ids, completion_mask, temperature).logprobs


def grouped_completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                group_size: int, temperature: float = 1.0):
    """completion_logprobs with each group's prompt run once (see grouped_completion_hidden)."""
    hidden = grouped_completion_hidden(model.base_model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                       group_size)
    return token_stats(model, hidden, completion_ids, completion_mask, temperature).logprobs
