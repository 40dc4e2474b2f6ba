"""One decoding step of a Llama-architecture model (Llama, SmolLM, ...) without Hugging
Face's per-layer Python: the sampler's hot loop.

A step of 64 rows through SmolLM2-135M's 30 layers spent about a third of its time outside
the matrix products (attention-mask building, the cache abstraction, autocast casting each
projection's input three times), and its products ran as seven small ones a layer. Here a
layer is two fused products (query/key/value, gate/up) and two plain ones (output, down),
on weights prepared once per `generate` call: under bf16 they are cast once and, where
oneDNN can, pre-packed into its blocked layout (the same values: measured identical
outputs, 1.1-2x faster at 64 down to 1 row on Zen 4, the gain largest as rows finish).

Numerically it is the model's own forward under the engine's autocast: the projections
take bf16 inputs and weights and give bf16 outputs (autocast's rule for linear), norms and
the residual stream stay fp32, rotary embeddings promote to fp32, attention is
models.compute.grouped_query_attention. Tests hold it to the model's forward (1e-5 in
fp32). Anything that is not exactly the Llama classes with plain Linear projections or peft
LoRA layers over them (whose adapters are folded into the weights prepared for the call) -
another wrapper, sliding windows, another architecture - takes the model's own forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer, LlamaMLP, LlamaModel

from aha.models.adapters import effective_weight, plain_lora_linear
from aha.models.compute import grouped_query_attention, onednn_packed, packed_linear
from aha.rollout.kv_cache import RoomyLayer


@dataclass(frozen=True)
class _Projection:
    """x W^T + b, W prepared for the compute dtype (bf16: cast once, packed when possible)."""
    weight: torch.Tensor
    bias: torch.Tensor | None
    packed: bool

    @classmethod
    def of(cls, linears: list[torch.nn.Linear], dtype: torch.dtype) -> _Projection:
        # (one linear in the weights' own dtype: its weight itself, no copy); a LoRA layer's
        # weight with its adapters folded in, once per generate call
        weight = _joined([effective_weight(linear) for linear in linears]).to(dtype)
        biases = [getattr(linear, "get_base_layer", lambda: linear)().bias for linear in linears]
        bias = None if biases[0] is None else _joined(biases).to(dtype)
        # oneDNN's blocked layout under bf16 (identical values, faster small products); fp32
        # and a build without it keep the plain weight
        packed = onednn_packed(weight) if dtype == torch.bfloat16 else None
        return cls(weight, bias, False) if packed is None else cls(packed, bias, True)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype != torch.float32:
            x = x.to(self.weight.dtype)  # what autocast does to a linear's input
        if self.packed:
            return packed_linear(x, self.weight, self.bias)
        return torch.nn.functional.linear(x, self.weight, self.bias)


@dataclass(frozen=True)
class _Layer:
    module: LlamaDecoderLayer
    qkv: _Projection
    out: _Projection
    gate_up: _Projection
    down: _Projection
    split: tuple[int, int]  # widths of qkv's output: queries and keys, values
    heads: tuple[int, int]  # query heads, key heads


class LlamaDecoding:
    """Decoding steps of one Llama model on weights as they are now, appending to `cache` (the
    prompts' cache, as the model's forward filled it): build a new one after the weights
    change (the HF engine builds one per generate call)."""

    def __init__(self, model, dtype: torch.dtype, cache):
        self.backbone: LlamaModel = model.base_model
        self.cache = cache
        if dtype != torch.float32:
            # attention under autocast reads the keys in the compute dtype: the cache keeps
            # them so (the same values, no cast of the whole cache every step)
            for layer in cache.layers:
                layer.keys_as(dtype)
        attention = self.backbone.layers[0].self_attn
        self.head_dim, self.scaling = attention.head_dim, attention.scaling
        layers = []
        for layer in self.backbone.layers:
            attn, mlp = layer.self_attn, layer.mlp
            queries, keys = attn.q_proj.out_features, attn.k_proj.out_features
            split, heads = (queries + keys, attn.v_proj.out_features), (queries // self.head_dim, keys // self.head_dim)
            layers.append(_Layer(layer, _Projection.of([attn.q_proj, attn.k_proj, attn.v_proj], dtype),
                                 _Projection.of([attn.o_proj], dtype),
                                 _Projection.of([mlp.gate_proj, mlp.up_proj], dtype),
                                 _Projection.of([mlp.down_proj], dtype), split, heads))
        self.layers = layers

    @staticmethod
    def fits(model, cache=None) -> bool:
        """Exactly Llama's classes, plain Linear (or plain LoRA) projections, and (where a cache is given)
        aha's whole-sequence cache."""
        backbone = getattr(model, "base_model", None)
        if type(backbone) is not LlamaModel or backbone.device.type != "cpu":  # oneDNN's packed weights: CPU only
            return False
        if cache is not None and (len(cache.layers) != len(backbone.layers)
                                  or any(type(layer) is not RoomyLayer for layer in cache.layers)):
            return False
        for layer in backbone.layers:
            if type(layer) is not LlamaDecoderLayer or type(layer.self_attn) is not LlamaAttention \
                    or type(layer.mlp) is not LlamaMLP:
                return False
            linears = (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj,
                       layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)
            if any(type(linear) is not torch.nn.Linear and not plain_lora_linear(linear) for linear in linears):
                return False
        return getattr(backbone.config, "pretraining_tp", 1) == 1

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """One new token a row: tokens and positions (N,), mask (N, L) of the L positions
        after this one is added (1 = attend). Appends to the cache and returns the final
        norm's output (N, hidden)."""
        N, d = tokens.shape[0], self.head_dim
        x = self.backbone.embed_tokens(tokens[:, None])  # (N, 1, D)
        cos, sin = self.backbone.rotary_emb(x, positions[:, None])
        # rotate_half(t) * sin is roll(t, d/2) * sin with sin's first half negated (the same
        # products): queries and keys rotate together in four operations
        cos, sin = cos[:, :, None], torch.cat([-sin[..., :d // 2], sin[..., d // 2:]], dim=-1)[:, :, None]
        # the additive mask eager attention takes: 0 to attend, the dtype's minimum not to
        additive = torch.zeros(mask.shape, dtype=x.dtype).masked_fill_(mask == 0, torch.finfo(x.dtype).min)
        additive = additive[:, None, None]
        for index, layer in enumerate(self.layers):
            module = layer.module
            qk, v = layer.qkv(module.input_layernorm(x)).split(layer.split, dim=-1)
            qk = qk.view(N, 1, -1, d)  # query heads, then key heads
            qk = qk * cos + qk.roll(d // 2, dims=-1) * sin
            q, k = qk.transpose(1, 2).split(layer.heads, dim=1)
            k, v = self.cache.layers[index].update(k, v.view(N, 1, -1, d).transpose(1, 2))
            attended, _ = grouped_query_attention(module.self_attn, q, k, v, additive, self.scaling)
            x = x + layer.out(attended.reshape(N, 1, -1))
            gate, up = layer.gate_up(module.post_attention_layernorm(x)).chunk(2, dim=-1)
            x = x + layer.down(module.mlp.act_fn(gate) * up)
        return self.backbone.norm(x)[:, -1]


def _joined(tensors: list[torch.Tensor]) -> torch.Tensor:
    return tensors[0].detach() if len(tensors) == 1 else torch.cat([t.detach() for t in tensors])

