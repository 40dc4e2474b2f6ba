"""The learner's view of a rollout: hidden states at the positions that predict completion
tokens, and from them per-token log-probs, entropies (policy) or values (critic)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aha.algorithms import entropy_from_logits
from aha.models.compute import positions_from_mask


def completion_hidden(backbone, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                      completion_ids: torch.Tensor, completion_mask: torch.Tensor) -> torch.Tensor:
    """(N, T, H) last hidden states at the positions that predict completion_t (the prompt's
    last token, then completion tokens 0..T-2). No LM head runs on prompt positions."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
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
    from transformers import DynamicCache

    G = group_size
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


def rollout_hidden(backbone, ro, rows: slice, width: int, group_size: int, share_prompt: bool) -> torch.Tensor:
    """Hidden states for rows of a Rollouts (completions cut to width columns). With
    share_prompt the rows must be whole groups, each group's prompt run once."""
    completion, mask = ro.completion_ids[rows, :width], ro.completion_mask[rows, :width]
    if share_prompt:
        return grouped_completion_hidden(backbone, ro.prompt_ids[rows][::group_size], ro.prompt_mask[rows][::group_size],
                                         completion, mask, group_size)
    return completion_hidden(backbone, ro.prompt_ids[rows], ro.prompt_mask[rows], completion, mask)


@dataclass
class TokenStats:
    logprobs: torch.Tensor  # (N, T) log pi(token), 0 on padding
    entropy: torch.Tensor | None  # (N, T) entropy of pi at each position, 0 on padding


def token_stats(model, hidden: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, temperature: float,
                entropy: str = "none") -> TokenStats:
    """Log-probs of targets under the LM head at the sampling temperature; entropy
    "none" | "detached" (for logging) | "grad" (for an entropy bonus)."""
    logits = model.get_output_embeddings()(hidden).float() / temperature
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
    hidden = grouped_completion_hidden(model.base_model, prompt_ids, prompt_mask, completion_ids, completion_mask, group_size)
    return token_stats(model, hidden, completion_ids, completion_mask, temperature).logprobs
