"""From a config to what `aha plan` forecasts: the model's shapes (its config.json on the meta
device: no weights read), and what one step runs (rows, token lengths from the task's own
prompts through the model's tokenizer, micro-batches, rounds, reference and critic)."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from aha.config import Config, ConfigError
from aha.models.compute import resolve_dtype
from aha.models.loading import EMBEDDED, cache_dir
from aha.perf.plan import Architecture, Workload

FORECAST_METHODS = ("rl", "dpo", "sft")
SAMPLE = 256  # prompts (or data rows) whose token lengths are read: the longest counts
# the embedded model's config.json (SmolLM2-135M-Instruct, dequantized into cache_dir() on first use), for a plan
# made before that: a run of the demo dequantizes it on its first load
EMBEDDED_CONFIG = dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                       num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
                       tie_word_embeddings=True, rope_theta=100000.0, rms_norm_eps=1e-5, bos_token_id=1,
                       eos_token_id=2, pad_token_id=2)


def model_source(name: str):
    """(the model's Hugging Face config, a loader of its tokenizer), reading no weights."""
    from transformers import AutoConfig, AutoTokenizer, LlamaConfig

    from aha.models.adapters import adapter_base, is_adapter_folder

    if name == "tiny":
        from aha.models.tiny import tiny_model, tiny_tokenizer

        return tiny_model(len(tiny_tokenizer())).config, tiny_tokenizer
    folder = cache_dir() / EMBEDDED if name == EMBEDDED else Path(name).expanduser()
    if name == EMBEDDED and not (folder / "config.json").is_file():
        from aha.models.loading import GGUF_FILE, embedded_gguf_path

        return LlamaConfig(**EMBEDDED_CONFIG), lambda: AutoTokenizer.from_pretrained(
            embedded_gguf_path().parent, gguf_file=GGUF_FILE)
    if folder.is_dir() and is_adapter_folder(folder):  # a LoRA checkpoint: its base, the adapter folded in
        return model_source(adapter_base(folder))
    if folder.is_dir():
        return AutoConfig.from_pretrained(folder, local_files_only=True), \
            lambda: AutoTokenizer.from_pretrained(folder, local_files_only=True)
    from aha.models.hub import parse

    found = parse(name)
    if found is None:
        raise ConfigError(f"model {name!r}: neither a built-in name, a folder nor a Hub id")
    return AutoConfig.from_pretrained(found[0], revision=found[1]), \
        lambda: AutoTokenizer.from_pretrained(found[0], revision=found[1])


def architecture(hf_config, lora) -> Architecture:
    """The model's shapes and parameter counts, from the architecture built on the meta device
    (with LoRA's adapters when lora.rank is set)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config)
    head = model.get_output_embeddings()
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    if lora.rank:
        from aha.models.adapters import add_lora

        add_lora(model, lora.rank, lora.alpha, lora.dropout, lora.target_modules)
    text = hf_config.get_text_config(decoder=True)
    params = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    heads = text.num_attention_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    return Architecture(text.num_hidden_layers, text.hidden_size, heads, getattr(text, "num_key_value_heads", heads)
                        or heads, head_dim, text.vocab_size, params, linear, trained)


def prompt_lengths(config: Config, tokenizer) -> tuple[int, int]:
    """(longest prompt, longest completion) in tokens over the first SAMPLE training rows: the
    task's prompts for rl (completions: the token budget), the data file's for dpo and sft."""
    from aha.tasks import build_task, encode_prompts

    task = build_task(config.task, config.base_dir)
    if config.method == "rl":
        prompts = encode_prompts(tokenizer, task, task.train[:SAMPLE])
        turns = config.env.max_turns if config.env.name else 1  # an episode's turns, each up to the budget
        return max(map(len, prompts)), config.rollout.max_new_tokens * turns
    from aha.config.paths import resolve_path
    from aha.training.supervised.sequences import encode_sequences, read_pairs

    if config.method == "dpo":
        rows = read_pairs(resolve_path(config.dpo.data, config.base_dir), with_margin=False)[:SAMPLE]
        texts, budget, key = [r["chosen"] for r in rows] + [r["rejected"] for r in rows], config.dpo.max_length, \
            "dpo.max_length"
        rows = rows + rows
    else:
        from aha.training.supervised.sft import sft_examples

        rows = sft_examples(config, task)[:SAMPLE]
        texts, budget, key = [r["response"] for r in rows], config.sft.max_length, "sft.max_length"
    stop = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
    seqs = encode_sequences(tokenizer, task, [r["prompt"] for r in rows], texts, stop, budget,
                            [r.get("where", "?") for r in rows], key)
    return max(len(s.prompt) for s in seqs), max(len(s.completion) for s in seqs)


def workload(config: Config, prompt: int, completion: int, dtype: torch.dtype) -> tuple[Workload, str]:
    """What a step runs, and the config key that sets its micro-batch's rows."""
    train, bytes_ = config.train, torch.finfo(dtype).bits // 8
    if config.method != "rl":
        batch = config.dpo.batch_size * 2 if config.method == "dpo" else config.sft.batch_size
        micro = max(1, train.micro_batch_size // 2) * 2 if config.method == "dpo" else train.micro_batch_size
        reference = config.method == "dpo" and (config.dpo.online or config.dpo.loss == "tdpo")
        notes = (f"upper estimate: every micro-batch as long as the longest prompt and completion ({prompt} + "
                 f"{completion} tokens)",)
        if config.method == "dpo":
            notes += ("the reference's log-probs of every pair are computed once, before the first step (not counted)",)
        if config.method == "dpo" and config.dpo.online:
            notes += ("dpo.online samples its pairs each step: the sampling is not forecast",)
        return Workload(bytes_, prompt, completion, batch, min(micro, batch), reference=reference, notes=notes), \
            "train.micro_batch_size"
    rollout, algo = config.rollout, config.algorithm
    G = rollout.group_size
    rows = rollout.prompts_per_step * G
    micro = min(rows, max(G, train.micro_batch_size // G * G))
    engine_rows = min(rows + rollout.partial_rollouts * G, max(G, rollout.batch_size // G * G))
    rounds = algo.max_rounds if algo.dynamic_sampling else 1
    reference = algo.kl_coef > 0
    forwards = int(reference) + int(algo.old_logprobs == "trainer") + int(algo.advantage == "gae")
    notes = [f"upper estimate: {rounds} sampling round{'s' * (rounds > 1)} a step, every group kept, every completion "
             f"{completion} tokens long"]
    if rollout.engine == "vllm":
        notes.append("rollout.engine=vllm samples in its own process: its memory and speed are not forecast")
    if config.env.name:
        notes.append(f"env.name={config.env.name}: an episode counted as {config.env.max_turns} turns of the budget; "
                     "the environment's own tokens are not")
    models = ["algorithm.teacher"] * bool(algo.teacher) + ["a reward model"] * any(r.model for r in config.reward)
    if models:
        notes.append(f"{' and '.join(models)}: not counted (weights and forwards)")
    key = "rollout.group_size" if G >= train.micro_batch_size else "train.micro_batch_size"
    return Workload(bytes_, prompt, completion, rows, micro, G, train.share_prompt and G > 1, rounds,
                    (rollout.prompts_per_step + rollout.partial_rollouts) * G, engine_rows, reference, forwards,
                    algo.advantage == "gae", algo.epochs, algo.epochs * algo.mini_batches, tuple(notes)), key


def planned(config: Config):
    """(Architecture, Workload, micro-batch key, the model's HF config, compute dtype) of a config."""
    if config.method not in FORECAST_METHODS:
        raise ConfigError(f"aha plan forecasts methods {', '.join(FORECAST_METHODS)}; method {config.method} is not "
                          "forecast")
    hf_config, tokenizer = model_source(config.model)
    dtype = resolve_dtype(config.train.dtype, torch.device("cpu"))
    arch = architecture(hf_config, config.lora)
    prompt, completion = prompt_lengths(config, tokenizer())
    work, key = workload(config, prompt, math.ceil(completion), dtype)
    return arch, work, key, hf_config, dtype
