"""What every sampling engine keeps the same way (EngineSettings), in a module of its own so
that the engines and the factory that picks one (engine.py) do not import each other."""

from __future__ import annotations

import torch

from aha.models.compute import stop_ids


class EngineSettings:
    """What every engine keeps the same way: the model it follows, the tokenizer, the
    sampling settings, and the pad and stop ids derived from them."""

    def __init__(self, model, tokenizer, max_new_tokens: int, temperature: float, top_p: float, batch_size: int,
                 dtype: torch.dtype):
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.batch_size = batch_size
        self.dtype = dtype
        self.pad_id = tokenizer.pad_token_id
        self.eos_ids = stop_ids(tokenizer, model)
        self.sync_seconds = 0.0  # time spent handing new weights to the engine, for time/sync_s
