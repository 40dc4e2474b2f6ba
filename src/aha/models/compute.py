"""How the model is run, shared by sampling and training: the compute dtype (bf16 autocast only
where the CPU runs bf16 natively) and position ids for padded rows."""

from __future__ import annotations

import contextlib

import torch


def native_bf16() -> bool:
    """AMX or AVX512-BF16 present. Without them bf16 matmuls are emulated and run several
    times slower than fp32 (measured: on an AVX2-only EPYC, sampling in bf16 stalled)."""
    cpu = torch.cpu
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(getattr(cpu, name, lambda: False)() for name in checks)


def resolve_dtype(name: str) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if native_bf16() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def autocast(dtype: torch.dtype):
    """Mixed precision for matmuls; weights stay fp32 (the optimizer's master copy)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=dtype)


def positions_from_mask(attention: torch.Tensor) -> torch.Tensor:
    """Position ids counted from each row's first real token, as `generate` numbers them
    with left padding (padding positions get 0; they are masked out anyway)."""
    return (attention.cumsum(dim=1) - 1).clamp(min=0)


def stop_token(tokenizer, model) -> int:
    """The token a completion ends with: the one the engine stops at (tokenizer EOS, else
    the generation config's), so training on it teaches the model to stop."""
    if tokenizer.eos_token_id is not None:
        return tokenizer.eos_token_id
    eos = model.generation_config.eos_token_id
    return eos[0] if isinstance(eos, list) else eos


def stop_ids(tokenizer, model) -> list[int]:
    """Every token a sampled completion ends at: the tokenizer's EOS and the generation
    config's (a chat model often has both)."""
    eos = model.generation_config.eos_token_id
    eos = eos if isinstance(eos, list) else [eos]
    return sorted({tokenizer.eos_token_id, *[e for e in eos if e is not None]} - {None})
