"""Per-token log-probs of given completions under a model (the learner's side of a rollout)."""

from __future__ import annotations

import torch


def completion_logprobs(model, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                        completion_ids: torch.Tensor, completion_mask: torch.Tensor,
                        temperature: float = 1.0) -> torch.Tensor:
    """(N, T) log pi(completion_t | prompt, completion_<t) / at the sampling temperature.

    Positions are counted from each row's first real token, as `generate` does with left
    padding, so these match the engine's sampling log-probs. The LM head runs only on the
    positions that predict completion tokens: prompt logits are never materialised."""
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    positions = (attention.cumsum(dim=1) - 1).clamp(min=0)
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention, position_ids=positions,
                              use_cache=False).last_hidden_state
    P, T = prompt_ids.shape[1], completion_ids.shape[1]
    logits = model.get_output_embeddings()(hidden[:, P - 1:P + T - 1]).float() / temperature
    picked = logits.gather(2, completion_ids.unsqueeze(2)).squeeze(2)
    return (picked - torch.logsumexp(logits, dim=2)) * completion_mask
