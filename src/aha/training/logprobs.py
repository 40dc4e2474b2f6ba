"""Per-token log-probs of given completions under a model (the learner's side of a rollout)."""

from __future__ import annotations

import torch


def positions_from_mask(attention: torch.Tensor) -> torch.Tensor:
    """Position ids counted from each row's first real token, as `generate` numbers them
    with left padding (padding positions get 0; they are masked out anyway)."""
    return (attention.cumsum(dim=1) - 1).clamp(min=0)


def _token_logprobs(model, hidden: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
    logits = model.get_output_embeddings()(hidden).float() / temperature
    picked = logits.gather(2, targets.unsqueeze(2)).squeeze(2)
    return picked - torch.logsumexp(logits, dim=2)


def completion_logprobs(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                        completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                        temperature: float = 1.0) -> torch.Tensor:
    """(N, T) log pi(completion_t | prompt, completion_<t), at the sampling temperature.

    The LM head runs only on positions that predict completion tokens: prompt logits are
    never materialised."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention, position_ids=positions_from_mask(attention),
                              use_cache=False).last_hidden_state
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    return _token_logprobs(model, hidden[:, P - 1:P + T - 1], completion_ids, temperature) * completion_mask


def grouped_completion_logprobs(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                                completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                                group_size: int, temperature: float = 1.0) -> torch.Tensor:
    """Same result as completion_logprobs for rows that come in groups of group_size
    sharing one prompt, but the prompt is run once per group instead of once per row.

    The prompt's KV cache is repeated G times (a differentiable copy, so its gradient is
    the sum over the group's completions, as in the unshared computation). For GRPO with
    long prompts and short answers this removes most of the learner's compute.
    prompt_ids / prompt_mask: (N/G, P), one row per group; completions: (N, T)."""
    from transformers import DynamicCache

    G = group_size
    cache = DynamicCache(config=model.config)
    prompt_out = model.base_model(input_ids=prompt_ids, attention_mask=prompt_mask.long(),
                                  position_ids=positions_from_mask(prompt_mask.long()), past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(G)
    last_prompt_hidden = prompt_out.last_hidden_state[:, -1:].repeat_interleave(G, dim=0)
    T = completion_ids.shape[1]
    if T == 1:
        hidden = last_prompt_hidden
    else:
        # the last completion token predicts nothing we score: feed tokens 0..T-2
        attention = torch.cat([prompt_mask.long().repeat_interleave(G, dim=0), completion_mask[:, :-1].long()], dim=1)
        positions = positions_from_mask(attention)[:, prompt_ids.shape[1]:]
        out = model.base_model(input_ids=completion_ids[:, :-1], attention_mask=attention, position_ids=positions,
                               past_key_values=cache, use_cache=True)
        hidden = torch.cat([last_prompt_hidden, out.last_hidden_state], dim=1)
    return _token_logprobs(model, hidden, completion_ids, temperature) * completion_mask
