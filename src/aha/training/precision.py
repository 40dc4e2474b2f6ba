"""Compute dtype: bf16 autocast only where the CPU runs bf16 natively."""

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
