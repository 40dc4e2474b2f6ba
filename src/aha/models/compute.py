"""How the model is run, shared by sampling and training: the compute dtype (bf16 autocast only
where the CPU runs bf16 natively), the attention kernel, the allocator, and position ids for
padded rows."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import sys

import torch


def native_bf16() -> bool:
    """AMX or AVX512-BF16 present. Without them bf16 matmuls are emulated and run several
    times slower than fp32 (measured: on an AVX2-only EPYC, sampling in bf16 stalled)."""
    cpu = torch.cpu
    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(getattr(cpu, name, lambda: False)() for name in checks)


# glibc's malloc gives every block over 32 MB its own mmap and returns it to the kernel on
# free, so each micro-batch's logits (a few hundred MB) were page-faulted in afresh: 45 ms a
# 200 MB tensor, seconds a GRPO step. Blocks under 1 GiB now come from the heap and stay
# there when freed; the heap keeps at most 1 GiB free at its top (M_TRIM_THRESHOLD) before
# it gives memory back, and the training loop trims it after every step
# (release_freed_memory), so the process holds about one step's working set.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
HEAP_BLOCK_LIMIT = 1 << 30


@functools.cache
def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):  # musl and other libcs have neither
        return None
    return libc


def retain_freed_memory() -> bool:
    """Apply the allocator setting above (glibc on Linux only; elsewhere nothing changes).
    Returns whether it was applied."""
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    applied = mallopt(_M_MMAP_THRESHOLD, HEAP_BLOCK_LIMIT) == 1 and mallopt(_M_TRIM_THRESHOLD, HEAP_BLOCK_LIMIT) == 1
    if not applied:
        logging.getLogger(__name__).warning("this libc refused mallopt: large tensors keep their own mmap")
    return applied


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the kernel (glibc's malloc_trim), once a training
    step: within a step freed tensors are reused, across steps the process does not keep the
    fragments of shapes it no longer uses. Measured over 14 GRPO-like steps of varying shapes
    (SmolLM2-135M, Zen 4): resident memory 3.97 -> 5.13 GB without it, 2.41 -> 2.61 GB with
    it, at the same step times."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


DEVICES = ("auto", "cpu", "cuda")


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """Where the models run: the CPU, or CUDA (this process's local GPU: local_rank modulo the
    GPUs it sees, so one per rank whether the launcher shows each rank every GPU or only its
    own). auto: CUDA where torch sees a GPU, else the CPU. Data stays on the CPU: each forward
    moves its inputs to the model's device and brings its per-token results back."""
    if name not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {name!r}")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda, but torch sees no CUDA device (a CPU build of torch, or no GPU): "
                         "set device: cpu or auto")
    if name == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


def resolve_dtype(name: str, device: torch.device = torch.device("cpu")) -> torch.dtype:
    """auto: bf16 autocast where the device computes bf16 natively (a CPU with AMX or
    AVX512-BF16, a GPU from Ampere on), else fp32."""
    if name == "auto":
        native = torch.cuda.get_device_capability(device)[0] >= 8 if device.type == "cuda" else native_bf16()
        return torch.bfloat16 if native else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[name]


def placement(device: str, dtype: str) -> tuple[torch.device, torch.dtype]:
    """config.device and train.dtype resolved together: the device, and the compute dtype on it."""
    placed = resolve_device(device)
    return placed, resolve_dtype(dtype, placed)


def autocast(dtype: torch.dtype, device: torch.device | str = "cpu"):
    """Mixed precision for matmuls on device (the model's: `model.device`); weights stay fp32
    (the optimizer's master copy)."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def full_precision(device: torch.device | str):
    """Autocast off on device, inside an autocast block too (fp32 where rounding matters)."""
    return torch.autocast(torch.device(device).type, enabled=False)


def on_device(device: torch.device, *tensors: torch.Tensor | None):
    """tensors on device (None stays None): one tensor back for one, else a tuple. On the
    device they are already on, `.to` returns the same tensor, so a CPU run copies nothing."""
    moved = tuple(None if t is None else t.to(device) for t in tensors)
    return moved[0] if len(moved) == 1 else moved


# Up to this many attention scores in a layer (rows x heads x queries x keys), aha runs its own
# attention (grouped_query_attention below) instead of the model's SDPA. On the CPU, SDPA's
# flash kernel took 0.9 s of a 7 s GRPO update in its backward alone on short sequences, and
# 1.5 ms a layer for one decoding step of 64 rows, where the grouped matmuls take 0.2 ms
# (SmolLM2-135M, Zen 4). It keeps every layer's probabilities for the backward, about 8 bytes
# a score: 4M scores x 30 layers is ~1 GB, so longer sequences stay on SDPA, which keeps none.
EAGER_ATTENTION_MAX_SCORES = 1 << 22
GROUPED_ATTENTION = "aha_grouped"


def grouped_query_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float, dropout: float = 0.0, **kwargs):
    """Hugging Face's eager attention without its repeat_kv: with grouped-query attention
    (H query heads sharing KV key/value heads) the H/KV query heads of a group are stacked
    against their one key/value head, so the keys and values (the whole KV cache, when
    decoding) are never copied H/KV times. query (N, H, T, d); key, value (N, KV, L, d);
    attention_mask additive (N, 1, T, L) as for eager. Returns ((N, T, H, d), probabilities)."""
    if any(kwargs.get(name) is not None for name in _ATTENTION_EXTRAS):
        # terms this plain form does not apply (a position bias, soft-capping, sinks): the
        # model's SDPA path does, and takes the same additive mask
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    N, H, T, d = query.shape
    KV, L = key.shape[1], key.shape[2]
    g = H // KV
    q = query.reshape(N, KV, g * T, d)  # query head h = k * g + j uses key/value head k
    scores = torch.matmul(q, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = (scores.view(N, KV, g, T, L) + attention_mask[:, :, None, :, :L]).view(N, KV, g * T, L)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = torch.nn.functional.dropout(probs, p=dropout, training=module.training)
    # the value's head size may differ from the query's (multi-head latent attention)
    out = torch.matmul(probs, value).view(N, H, T, value.shape[-1]).transpose(1, 2).contiguous()
    return out, probs.view(N, H, T, L)


# attention inputs some models pass that grouped_query_attention leaves to SDPA
_ATTENTION_EXTRAS = ("position_bias", "softcap", "s_aux", "sinks")


@functools.cache
def _register_grouped_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(GROUPED_ATTENTION, grouped_query_attention)
    AttentionMaskInterface.register(GROUPED_ATTENTION, eager_mask)  # the additive mask eager takes


@contextlib.contextmanager
def attention_for(model, scores: int):
    """aha's grouped attention inside the block when a layer's score count is small (see
    EAGER_ATTENTION_MAX_SCORES), else the model's own implementation."""
    config = model.config
    current = config._attn_implementation
    # a composite model (vision tower, ...) may set each part on its own: left as it is
    switchable = getattr(model, "_can_set_attn_implementation",
                         lambda: False)() and not getattr(config, "sub_configs", None)
    on_cpu = model.device.type == "cpu"  # on a GPU the model's SDPA (flash) kernels are the fast ones
    if scores > EAGER_ATTENTION_MAX_SCORES or current != "sdpa" or not switchable or not on_cpu:
        yield
        return
    _register_grouped_attention()
    try:
        model.set_attn_implementation(GROUPED_ATTENTION)
        yield
    finally:
        model.set_attn_implementation(current)


def attention_heads(config) -> int | None:
    """Query heads a layer of the (text) model, None where the config does not say."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    return getattr(text, "num_attention_heads", None)


def attention_scores(config, rows: int, queries: int, keys: int) -> int:
    """Scores a layer computes for rows x queries x keys; unknown head count: too many to
    switch (attention_for then keeps the model's own attention)."""
    heads = attention_heads(config)
    return rows * heads * queries * keys if heads else EAGER_ATTENTION_MAX_SCORES + 1


def plain_head(model) -> torch.nn.Linear | None:
    """The model's LM head when it is a plain Linear: aha then runs it in fp32 itself, for the
    learner's log-probs and the sampler's alike (FP32Head). None for a head with a forward
    of its own, which runs as it is."""
    head = model.get_output_embeddings()
    return head if type(head) is torch.nn.Linear else None


def onednn_packed(weight: torch.Tensor) -> torch.Tensor | None:
    """A Linear's (out, in) weight in oneDNN's blocked layout, for packed_linear: the same
    products, faster on few rows (the layout is chosen for 64). None where this build or CPU
    has no such layout."""
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight, 64)
    except (RuntimeError, AttributeError):
        return None


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x W^T + b on a weight from onednn_packed (x, the weight and b in one dtype)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


# Without oneDNN's packed layout, the head's product is taken this many vocabulary entries
# at a time: one (rows, 49152) fp32 product ran at 89 GFLOP/s on 64 rows, slices of 2048 at
# 125 (Zen 4; 122 -> 151 at 256 rows), its operands staying in cache.
HEAD_VOCAB_SLICE = 2048


class FP32Head:
    """The LM head's logits hidden W^T + b in fp32, under autocast too: logits rounded to
    bf16 move in steps of 0.125 at 20, noise every importance ratio would carry. Learner and
    sampler both take their logits from here, so they compute the same numbers.

    The weight is packed once into oneDNN's blocked layout (about 40 ms for SmolLM2's
    49152 x 576): 190 against 131 GFLOP/s for the sliced product on 64 rows (Zen 4), and a
    row's logits do not depend on how many rows are computed with it (the sliced product's
    moved by 2e-6 between 64 rows and 1). Build one per weights: it holds them as they were.
    No autograd: the learner's backward through the head is written by hand."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.weight = weight.detach().float()
        self.bias = None if bias is None else bias.detach().float()
        # None: the sliced product (a GPU's matmul needs neither)
        self.packed = onednn_packed(self.weight) if self.weight.device.type == "cpu" else None

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and hidden.requires_grad:
            raise RuntimeError("FP32Head does not differentiate; compute the head's gradient by hand")
        with full_precision(hidden.device):
            flat = hidden.reshape(-1, hidden.shape[-1]).float()
            if self.packed is not None:
                logits = packed_linear(flat, self.packed, self.bias)
            elif flat.device.type != "cpu":  # a GPU: one matmul (the slices are a CPU cache's size)
                logits = torch.nn.functional.linear(flat, self.weight, self.bias)
            else:
                logits = flat.new_empty(flat.shape[0], self.weight.shape[0])
                for start in range(0, self.weight.shape[0], HEAD_VOCAB_SLICE):
                    end = start + HEAD_VOCAB_SLICE
                    torch.mm(flat, self.weight[start:end].t(), out=logits[:, start:end])
                if self.bias is not None:
                    logits += self.bias
        return logits.view(*hidden.shape[:-1], self.weight.shape[0])


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
