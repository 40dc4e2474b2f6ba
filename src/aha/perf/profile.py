"""What `aha plan` measures once on this machine for a model's architecture: the seconds a token
costs one layer of aha's learner (forward and backward, and forward alone), a decoding step of
aha's engine a layer, the fp32 LM head a token, AdamW a parameter, and the activation bytes a
layer keeps a token for the backward. Measured on models of the architecture built with 1 and 3
layers, random weights and a tiny vocabulary (a layer's cost is the difference), the head on a
random weight of the real vocabulary; cached by CPU, torch and transformers version, threads,
compute dtype and architecture, so only the first plan of a setting takes the ~10 s."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path

import torch

from aha.models.compute import FP32Head, autocast
from aha.models.loading import cache_dir
from aha.models.tiny import tiny_tokenizer
from aha.perf.plan import Profile
from aha.rollout.hf_engine import HFEngine, draw
from aha.training.logprobs import completion_hidden, token_stats

PROFILE_VERSION = 2
ROWS, CONTEXT, NEW_TOKENS, LONG_CONTEXT = 64, 16, 16, 240  # the decoding measurements' shapes
TRAIN_ROWS, TRAIN_LENGTH = 32, 32  # the learner's: 32 rows of 16 prompt and 16 completion tokens (1,024 tokens)
SAVED_ROWS = 4  # the activations' count: 4 rows against 8 (bytes, not time: small is enough)
HEAD_TOKENS = (128, 512)  # the LM head's: scored tokens of the two measurements
ADAM_PARAMS = 1 << 25  # 32M parameters for AdamW's measurement
FEW, MANY = 1, 3  # layers of the two models whose difference is one layer's cost (over 2)


def profile_key(hf_config, dtype: torch.dtype, lora: tuple, vocab: int) -> dict:
    """What a profile depends on: the machine, the libraries, the threads, the dtype and the
    architecture's shapes (not its depth: costs are a layer's)."""
    import transformers

    text = hf_config.get_text_config(decoder=True)
    shapes = {k: v for k, v in text.to_dict().items() if isinstance(v, (int, float, str, bool)) and k not in (
        "num_hidden_layers", "vocab_size", "transformers_version", "_name_or_path", "torch_dtype", "dtype")}
    return {"version": PROFILE_VERSION, "cpu": cpu_model(), "torch": torch.__version__,
            "transformers": transformers.__version__, "threads": torch.get_num_threads(), "dtype": str(dtype),
            "lora": list(lora), "vocab": vocab, "shapes": shapes}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def profile_path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir().parent / "perf" / f"profile-{digest}.json"


def _cached(path: Path, key: dict, make):
    """The JSON value stored at path for key, else make()'s, stored there (atomically)."""
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved.get("key") == key:
            return saved["value"]
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"key": key, "value": value}, indent=1))
    tmp.replace(path)
    return value


def activation_bytes_per_token(hf_config, dtype: torch.dtype, lora: tuple = ()) -> float:
    """The activation bytes a layer of the architecture keeps a token for the backward (counted
    once, under a second: it depends on the libraries, the dtype and the shapes, not the CPU)."""
    key = {k: v for k, v in profile_key(hf_config, dtype, lora, 0).items() if k not in ("cpu", "threads", "vocab")}
    key["what"] = "activations"

    def count() -> float:
        tokenizer = tiny_tokenizer()
        models = {n: _model(hf_config, n, lora, len(tokenizer)) for n in (FEW, MANY)}
        grown = {n: saved_bytes(m, dtype, 2 * SAVED_ROWS) - saved_bytes(m, dtype, SAVED_ROWS)
                 for n, m in models.items()}
        per_token = (grown[MANY] - grown[FEW]) / (MANY - FEW) / (SAVED_ROWS * TRAIN_LENGTH)
        return max(0.0, per_token - eager_score_bytes(dtype) * attention_heads(hf_config) * TRAIN_LENGTH)

    return _cached(profile_path(key).with_name("activations-" + profile_path(key).name), key, count)


def cached_profile(hf_config, dtype: torch.dtype, lora: tuple = (), vocab: int | None = None) -> tuple[Profile, bool]:
    """This machine's costs for the architecture (measured now, ~10 s, unless cached), and
    whether they were measured now. lora: (rank, alpha, dropout, target_modules), () for none."""
    vocab = vocab or hf_config.get_text_config(decoder=True).vocab_size
    key = profile_key(hf_config, dtype, lora, vocab)
    path = profile_path(key)
    fresh = not path.is_file()
    found = _cached(path, key, lambda: asdict(measure(hf_config, dtype, lora, vocab)))
    found["saved_bytes_token"] = activation_bytes_per_token(hf_config, dtype, lora)
    return Profile(**{k: tuple(v) if isinstance(v, list) else v for k, v in found.items()}), fresh


def _model(hf_config, layers: int, lora: tuple, vocab: int):
    from transformers import AutoModelForCausalLM

    config = hf_config.__class__.from_dict({**hf_config.to_dict(), "num_hidden_layers": layers, "vocab_size": vocab})
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        model = AutoModelForCausalLM.from_config(config).float()
    finally:
        torch.random.set_rng_state(state)
    if lora:
        from aha.models.adapters import add_lora

        add_lora(model, *lora)  # rank, alpha, dropout, target_modules
    return model.eval()


def best_of(run, repeats: int = 3) -> float:
    """The least seconds of `repeats` calls of run(), after one call that warms caches."""
    run()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return min(times)


def measure(hf_config, dtype: torch.dtype, lora: tuple, vocab: int) -> Profile:
    """This machine's costs for the architecture, each from models of FEW and MANY layers."""
    tokenizer = tiny_tokenizer()
    models = {n: _model(hf_config, n, lora, len(tokenizer)) for n in (FEW, MANY)}
    per_layer = lambda cost: (cost(models[MANY]) - cost(models[FEW])) / (MANY - FEW)
    tokens = TRAIN_ROWS * TRAIN_LENGTH
    train = per_layer(lambda m: best_of(lambda: _learner_pass(m, dtype, True))) / tokens
    forward = per_layer(lambda m: best_of(lambda: _learner_pass(m, dtype, False))) / tokens
    shapes = ((1, CONTEXT), (ROWS, CONTEXT), (ROWS, LONG_CONTEXT))  # (rows, prompt tokens)
    steps = {(n, *shape): _decode_seconds(models[n], tokenizer, dtype, *shape, forward) / NEW_TOKENS
             for n in (FEW, MANY) for shape in shapes}
    one, full, long = ((steps[(MANY, *shape)] - steps[(FEW, *shape)]) / (MANY - FEW) for shape in shapes)
    # a layer's step: a + b rows + c rows x context (the keys read), context the steps' mean
    context = CONTEXT + NEW_TOKENS / 2
    by_context = max(0.0, (long - full) / (ROWS * (LONG_CONTEXT - CONTEXT)))
    by_rows = max(0.0, (full - one) / (ROWS - 1) - by_context * context)
    decode = (max(0.0, one - by_rows - by_context * context), by_rows, by_context)
    outside = [steps[(FEW, r, CONTEXT)] - FEW * (decode[0] + decode[1] * r + decode[2] * r * context)
               for r in (1, ROWS)]
    head_train, head_forward, head_decode = _head(hf_config, vocab, dtype)
    return Profile(train, forward, head_train, head_forward, decode, _through(1, outside[0], ROWS, outside[1]),
                   head_decode, _adam_seconds(), 0.0, TRAIN_LENGTH, _fault_seconds(models[MANY], dtype, lora))


def _learner_pass(model, dtype: torch.dtype, backward: bool) -> None:
    rows, half = TRAIN_ROWS, TRAIN_LENGTH // 2
    ids = torch.randint(3, model.config.vocab_size, (rows, TRAIN_LENGTH))
    ones = torch.ones(rows, half)
    with torch.set_grad_enabled(backward):
        if backward:
            model.train()
        with autocast(dtype):
            hidden = completion_hidden(model.base_model, ids[:, :half], ones, ids[:, half:], ones)
        if backward:
            hidden.float().square().mean().backward()
            model.zero_grad(set_to_none=True)
            model.eval()


def saved_bytes(model, dtype: torch.dtype, rows: int) -> int:
    """Bytes of the distinct tensors (parameters excepted) that a training forward of `rows`
    rows keeps for its backward."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    half = TRAIN_LENGTH // 2
    ids, ones = torch.randint(3, model.config.vocab_size, (rows, TRAIN_LENGTH)), torch.ones(rows, half)
    model.train()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast(dtype):
        completion_hidden(model.base_model, ids[:, :half], ones, ids[:, half:], ones)
    model.eval()
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in seen.items() if ptr not in params)


def eager_score_bytes(dtype: torch.dtype) -> int:
    """Bytes aha's grouped attention keeps an attention score: the fp32 softmax and, under
    bf16, its bf16 copy for the product with the values (models/compute.py)."""
    return 4 + (0 if dtype == torch.float32 else torch.finfo(dtype).bits // 8)


def attention_heads(hf_config) -> int:
    return hf_config.get_text_config(decoder=True).num_attention_heads


def _decode_seconds(model, tokenizer, dtype: torch.dtype, rows: int, context: int, forward_s: float) -> float:
    """Seconds of NEW_TOKENS decoding steps of `rows` rows after a prompt of `context` tokens
    (its prefill, one prompt's forward, taken off), every row running to the end."""
    engine = HFEngine(model, tokenizer, NEW_TOKENS, batch_size=rows, dtype=dtype)
    engine.eos_ids = [-1]  # no token stops a row: each step runs all of them
    prompt = torch.randint(3, len(tokenizer), (context,)).tolist()
    layers = model.config.num_hidden_layers
    return best_of(lambda: engine.generate([prompt], group_size=rows), 2) - forward_s * context * layers


def _head(hf_config, vocab: int, dtype: torch.dtype) -> tuple[tuple, tuple, tuple]:
    """The fp32 head on a random (vocab, hidden) weight: the learner's forward + backward and
    forward alone (a + b scored tokens: packing the weight is a call's), and the sampler's
    head and draw a step (a + b rows; its weight packed once a generate call)."""
    hidden = hf_config.get_text_config(decoder=True).hidden_size
    weight = torch.randn(vocab, hidden) * 0.02

    def learner(rows: int, backward: bool) -> None:
        head = torch.nn.Linear(hidden, vocab, bias=False)
        head.weight = torch.nn.Parameter(weight, requires_grad=backward)
        x = torch.randn(rows, 1, hidden, requires_grad=backward)
        with torch.set_grad_enabled(backward):
            logp = token_stats(_HeadOnly(head), x, torch.randint(0, vocab, (rows, 1)), torch.ones(rows, 1), 1.0,
                               "detached", grad_dtype=dtype).logprobs
            if backward:
                logp.sum().backward()

    few, many = HEAD_TOKENS
    line = lambda cost: _through(few, cost(few), many, cost(many))
    train = line(lambda rows: best_of(lambda: learner(rows, True)))
    forward = line(lambda rows: best_of(lambda: learner(rows, False)))
    head = FP32Head(weight, None)
    step = lambda rows: best_of(lambda: draw(head(torch.randn(rows, hidden)), 1.0, 1.0, False), 5)
    return train, forward, _through(1, step(1), ROWS, step(ROWS))


def _through(x0: int, y0: float, x1: int, y1: float) -> tuple[float, float]:
    """(a, b) of the line a + b x through two measurements (neither below 0)."""
    slope = max(0.0, (y1 - y0) / (x1 - x0))
    return max(0.0, y0 - slope * x0), slope


class _HeadOnly(torch.nn.Module):
    def __init__(self, head: torch.nn.Linear):
        super().__init__()
        self.head = head

    def get_output_embeddings(self):
        return self.head


def _adam_seconds(params: int = ADAM_PARAMS) -> float:
    """AdamW's step, seconds a parameter, on `params` parameters in tensors of 4M (with its
    state, 16 bytes a parameter: out of the caches, as a model's is)."""
    chunk = 1 << 22
    tensors = [torch.nn.Parameter(torch.zeros(min(chunk, params - s))) for s in range(0, params, chunk)]
    for t in tensors:
        t.grad = torch.full_like(t, 1e-3)
    return best_of(torch.optim.AdamW(tensors, lr=1e-9).step) / params


def _fault_seconds(model, dtype: torch.dtype, lora: tuple) -> float:
    """Seconds a byte of a step's working set costs to fault in: the loop hands the heap's free
    pages back to the kernel after every step (release_freed_memory), so each step's first
    forward and backward writes fresh pages. A learner pass after the release against one
    that reuses the last one's memory, over the bytes it allocates (its activations, its
    weights' copies in the compute dtype and their fp32 gradients)."""
    from aha.models.compute import release_freed_memory

    warm = best_of(lambda: _learner_pass(model, dtype, True))
    cold = []
    for _ in range(3):
        release_freed_memory()
        began = time.perf_counter()
        _learner_pass(model, dtype, True)
        cold.append(time.perf_counter() - began)
    layers = model.config.num_hidden_layers
    saved = activation_bytes_per_token(model.config, dtype, lora) * TRAIN_ROWS * TRAIN_LENGTH * layers
    weights = sum(p.numel() for p in model.parameters()) * (4 + torch.finfo(dtype).bits // 8)
    return max(0.0, min(cold) - warm) / (saved + weights)
