"""`aha plan`: a run's peak memory and step time, forecast before anything loads. Pure functions
of the model's shapes (Architecture), what a step runs (Workload, perf/workload.py) and this
machine's measured costs (Profile, perf/profile.py).

Memory is what a training process holds at the peak of a step: what stays for the whole run
(the Python baseline, fp32 weights, gradients and AdamW's two moments of what trains, a frozen
reference, a critic), plus the sampling phase (the engine's KV cache, its copies of the weights,
its logits), plus the update (one micro-batch's activations and fp32 logits, autocast's weight
copies, AdamW's temporary). The sampling phase counts on top of the update: glibc's heap keeps
what sampling freed until the step ends (the loop trims it then) and the update's large blocks
seldom fit in its holes; measured on the demo and a 256-token setting, the update's peak sat on
top of it. Every term is an upper estimate of one step: every completion runs to its token
budget, every dynamic-sampling round is drawn and every group kept."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

GiB = 1024 ** 3
EAGER_MAX_SCORES = 1 << 22  # models/compute.py EAGER_ATTENTION_MAX_SCORES: aha's attention, else SDPA (CPU)


@dataclass(frozen=True)
class Architecture:
    """The shapes of a model, read from its config (no weights)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    params: int  # every parameter (LoRA's adapters included)
    linear_params: int  # the layers' Linear weights: what autocast and the engine copy to the compute dtype
    trained_params: int  # what the optimizer steps (the adapters alone under LoRA)

    @property
    def layer_linear_params(self) -> float:
        return self.linear_params / self.layers


@dataclass(frozen=True)
class Workload:
    """What one step runs, from the config and the task's prompts."""

    dtype_bytes: int  # the compute dtype's: 2 under bf16 autocast, 4 in fp32
    prompt_tokens: int  # the longest prompt (rows are padded to it)
    completion_tokens: int  # the token budget (rl), the longest completion (dpo, sft)
    rows: int  # sequences trained a step
    micro_rows: int  # sequences a forward/backward
    group_size: int = 1  # rows sharing one prompt (run once in the learner with share_prompt)
    share_prompt: bool = False
    rounds: int = 0  # generation rounds a step (0: nothing sampled)
    round_rows: int = 0  # sequences sampled a round
    engine_rows: int = 0  # sequences sampled at once (a chunk of the round)
    reference: bool = False  # a frozen copy of the policy in memory
    extra_forwards: int = 0  # forwards over the batch before the update (reference, old log-probs, critic)
    critic: bool = False
    passes: int = 1  # algorithm.epochs
    optimizer_steps: int = 1  # epochs x mini-batches
    notes: tuple[str, ...] = ()  # what the forecast leaves out


@dataclass(frozen=True)
class Profile:
    """This machine's measured costs for an architecture, in its compute dtype (perf/profile.py)."""

    train_s_token: float  # learner forward + backward, seconds a token a layer
    forward_s_token: float  # forward without gradient (reference, prefill), seconds a token a layer
    head_train_s: tuple[float, float]  # fp32 LM head, forward + backward: a + b scored tokens seconds a micro-batch
    head_forward_s: tuple[float, float]
    decode_s: tuple[float, float, float]  # a decoding step a layer: a + b rows + c rows x context seconds
    decode_fixed_s: tuple[float, float]  # a step outside the layers (embedding, loop): a + b rows
    head_decode_s: tuple[float, float]  # the fp32 head and the draw of a step: a + b rows
    adam_s_param: float  # AdamW's step, seconds a trained parameter
    saved_bytes_token: float  # activations a layer keeps for the backward, bytes a token (attention scores apart)
    train_length: int = 32  # the sequence length the learner's costs were measured at
    fault_s_byte: float = 0.0  # a step's first write of a byte of its working set (pages handed back each step)


@dataclass(frozen=True)
class Term:
    name: str
    bytes: float
    phase: str  # run (held throughout), sampling or update
    setting: str = ""  # the config key that shrinks it


@dataclass
class Forecast:
    terms: list[Term]
    seconds: dict[str, float]  # generate, prepare, update: seconds a step
    notes: list[str] = field(default_factory=list)

    def phase_bytes(self, phase: str) -> float:
        return sum(t.bytes for t in self.terms if t.phase == phase)

    @property
    def peak_bytes(self) -> float:
        return sum(t.bytes for t in self.terms)

    @property
    def step_seconds(self) -> float:
        return sum(self.seconds.values())


def micro_batch_shape(w: Workload) -> tuple[int, int, int]:
    """(backbone tokens, scored tokens, groups) of one micro-batch: with share_prompt each
    group's prompt runs once and the completions after it (the last token predicts nothing)."""
    groups, scored = max(1, w.micro_rows // w.group_size), w.micro_rows * w.completion_tokens
    if w.share_prompt:
        return groups * w.prompt_tokens + w.micro_rows * (w.completion_tokens - 1), scored, groups
    return w.micro_rows * (w.prompt_tokens + w.completion_tokens), scored, groups


def attention_scores(a: Architecture, w: Workload) -> list[int]:
    """Scores a layer computes in one micro-batch, per pass (the prompts' pass first under share_prompt)."""
    P, T, groups = w.prompt_tokens, w.completion_tokens, micro_batch_shape(w)[2]
    if w.share_prompt:
        return [groups * a.heads * P * P, w.micro_rows * a.heads * (T - 1) * (P + T - 1)]
    return [w.micro_rows * a.heads * (P + T) ** 2]


def activation_bytes(a: Architecture, w: Workload, saved_bytes_token: float) -> float:
    """What one micro-batch's forward keeps for the backward: each layer's measured bytes a
    token, the scores of aha's attention (fp32 and the compute dtype) or, above
    EAGER_MAX_SCORES, SDPA's output and log-sum-exp, the prompts' keys and values repeated for
    each group's rows, and autocast's copies of the weights in the compute dtype."""
    tokens = micro_batch_shape(w)[0]
    score_bytes = 4 + (w.dtype_bytes if w.dtype_bytes != 4 else 0)
    passes = attention_scores(a, w)
    rows = [max(1, w.micro_rows // w.group_size), w.micro_rows] if w.share_prompt else [w.micro_rows]
    queries = [w.prompt_tokens, w.completion_tokens - 1] if w.share_prompt else [w.prompt_tokens + w.completion_tokens]
    eager = sum(s * score_bytes for s in passes if s <= EAGER_MAX_SCORES)
    sdpa = sum(r * q * (a.heads * a.head_dim * w.dtype_bytes + a.heads * 4)
               for s, r, q in zip(passes, rows, queries) if s > EAGER_MAX_SCORES)
    repeated = w.micro_rows * w.prompt_tokens * 2 * a.kv_heads * a.head_dim * w.dtype_bytes if w.share_prompt else 0
    per_layer = tokens * saved_bytes_token + eager + sdpa + repeated
    return a.layers * per_layer + weight_copies(a, w)


def weight_copies(a: Architecture, w: Workload) -> float:
    """The layers' weights in the compute dtype, as autocast caches them for a forward (none in fp32)."""
    return a.linear_params * w.dtype_bytes if w.dtype_bytes != 4 else 0


def kv_cache_bytes(a: Architecture, w: Workload) -> float:
    """The engine's cache while it samples engine_rows sequences: room for prompt and budget."""
    return w.engine_rows * (w.prompt_tokens + w.completion_tokens) * a.layers * 2 * a.kv_heads * a.head_dim * \
        w.dtype_bytes


def memory_terms(a: Architecture, w: Workload, saved_bytes_token: float, baseline: float,
                 micro_key: str = "train.micro_batch_size") -> list[Term]:
    """Every term of the forecast, each with the setting that shrinks it. micro_key: the key
    that sets w.micro_rows (rollout.group_size when a group alone fills a micro-batch)."""
    lora = a.trained_params < a.params
    keep = "lora.rank > 0 (only the adapters train)" if not lora else "lora.rank (lower)"
    terms = [Term("process before the model loads (python, torch)", baseline, "run"),
             Term("weights (fp32)", a.params * 4, "run", "model (smaller)"),
             Term("gradients (fp32)", a.trained_params * 4, "run", keep),
             Term("AdamW moments (2 x fp32)", a.trained_params * 8, "run", keep)]
    if w.reference:
        terms.append(Term("reference model (fp32)", a.params * 4, "run", "algorithm.kl_coef=0 (no reference)"))
    if w.critic:
        terms.append(Term("critic: weights, gradients, moments", a.params * 16, "run",
                          "algorithm.advantage (gae trains a critic)"))
    if w.rounds:
        rows_key = "rollout.group_size" if w.group_size >= w.engine_rows > 1 else "rollout.batch_size"
        terms.append(Term(f"engine KV cache ({w.engine_rows} sequences at once)", kv_cache_bytes(a, w), "sampling",
                          rows_key))
        # autocast's cache (the prefill) and the decoding step's own prepared copies; the fp32 head packed
        copies = 2 * weight_copies(a, w) if w.dtype_bytes != 4 else a.linear_params * 4
        terms.append(Term("engine weights (compute dtype, twice) and fp32 head", copies + a.vocab * a.hidden * 4,
                          "sampling", "model (smaller)"))
        terms.append(Term("engine logits of a step (fp32, 3 copies)", w.engine_rows * a.vocab * 4 * 3, "sampling",
                          rows_key))
    scored = micro_batch_shape(w)[1]
    terms.append(Term(f"activations ({w.micro_rows} sequences a micro-batch)",
                      activation_bytes(a, w, saved_bytes_token), "update", micro_key))
    terms.append(Term("logits (fp32) and their gradient",
                      scored * a.vocab * (4 + w.dtype_bytes) + a.vocab * a.hidden * 4, "update", micro_key))
    terms.append(Term("AdamW's temporary (a copy of what trains)", a.trained_params * 4, "update", keep))
    return terms


def length_factor(a: Architecture, length: int, measured: int) -> float:
    """How a token's layer cost grows with the keys it attends to: the layer's FLOPs a token
    (its products, 2 x weights, and attention's, 4 x keys x heads x head size) at `length`
    over those at the length it was measured at."""
    linear, attention = 2 * a.layer_linear_params, 4 * a.heads * a.head_dim
    return (linear + attention * length) / (linear + attention * measured)


def generate_seconds(a: Architecture, w: Workload, p: Profile) -> float:
    """Every round's chunks: the distinct prompts' prefill, then one decoding step a token of
    the budget with every row of the chunk running (the layers, the rest of the loop, the
    fp32 head and the draw)."""
    if not w.rounds:
        return 0.0
    P, T = w.prompt_tokens, w.completion_tokens
    context = P + T / 2

    def chunk(rows: int) -> float:
        prefill = max(1, rows // w.group_size) * P * a.layers * p.forward_s_token * length_factor(a, P, p.train_length)
        d, f, h = p.decode_s, p.decode_fixed_s, p.head_decode_s
        step = a.layers * (d[0] + d[1] * rows + d[2] * rows * context) + f[0] + f[1] * rows + h[0] + h[1] * rows
        return prefill + T * step

    full, rest = divmod(w.round_rows, w.engine_rows)
    return w.rounds * (full * chunk(w.engine_rows) + (chunk(rest) if rest else 0.0))


def step_seconds(a: Architecture, w: Workload, p: Profile) -> dict[str, float]:
    """Seconds a step: sampling, the forwards before the update, the update (forward and
    backward of every micro-batch, epochs times, and the optimizer steps)."""
    backbone, scored, _ = micro_batch_shape(w)
    micro = math.ceil(w.rows / w.micro_rows)
    scale = length_factor(a, w.prompt_tokens + w.completion_tokens, p.train_length)
    head = lambda cost: cost[0] + cost[1] * scored
    forward = micro * (backbone * a.layers * p.forward_s_token * scale + head(p.head_forward_s))
    train = micro * (backbone * a.layers * p.train_s_token * scale + head(p.head_train_s))
    critic = micro * backbone * a.layers * p.train_s_token * scale if w.critic else 0.0
    optimizer = w.optimizer_steps * (a.trained_params + (a.params if w.critic else 0)) * p.adam_s_param
    return {"generate": generate_seconds(a, w, p), "prepare": w.extra_forwards * forward,
            "update": w.passes * (train + critic) + optimizer}


def forecast(a: Architecture, w: Workload, p: Profile, baseline: float, micro_key: str = "train.micro_batch_size"
             ) -> Forecast:
    """Memory and time together; the time adds faulting in the step's working set (what
    sampling and the update allocate, and the gradients), which the loop hands back to the
    kernel after every step."""
    terms = memory_terms(a, w, p.saved_bytes_token, baseline, micro_key)
    seconds = step_seconds(a, w, p)
    fresh = sum(t.bytes for t in terms if t.phase != "run") + a.trained_params * 4
    seconds["page faults"] = fresh * p.fault_s_byte
    return Forecast(terms, seconds, list(w.notes))


def to_fit(f: Forecast, limit: float) -> list[Term]:
    """The largest terms that could shrink, biggest first, until what is left fits in limit:
    the settings to change, in the order that helps most."""
    movable = sorted((t for t in f.terms if t.setting), key=lambda t: -t.bytes)
    over, chosen = f.peak_bytes - limit, []
    for term in movable:
        if over <= 0:
            break
        chosen.append(term)
        over -= term.bytes
    return chosen


def gib(n: float) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB / 100 else f"{n / 2 ** 20:.1f} MiB"


def format_forecast(f: Forecast, available: float | None = None, total: float | None = None) -> str:
    """The table `aha plan` prints."""
    lines = ["memory at the peak of a step (what the run holds, what sampling left, the update):"]
    for phase, title in (("run", "held throughout"), ("sampling", "while sampling"), ("update", "while updating")):
        chosen = [t for t in f.terms if t.phase == phase]
        if chosen:
            lines.append(f"  {title}: {gib(f.phase_bytes(phase))}")
            lines += [f"    {t.name:<52} {gib(t.bytes):>11}" + (f"   [{t.setting}]" if t.setting else "")
                      for t in chosen]
    lines.append(f"  peak {gib(f.peak_bytes)}" + (f" of {gib(total)} ({gib(available)} free now)" if total else ""))
    parts = ", ".join(f"{k} {v:.2f}" for k, v in f.seconds.items() if v)
    lines.append(f"time: {f.step_seconds:.2f} s a step ({parts})" if f.seconds else "time: not forecast")
    lines += [f"note: {n}" for n in f.notes]
    return "\n".join(lines)
