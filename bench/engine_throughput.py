"""Sampling throughput of one engine alone: 64 sequences (8 prompts x 8 samples, and 64
prompts x 1) of the demo's task, up to 128 new tokens (or the second argument), two repeats
after a warm-up.
Counted tokens are each completion's up to and including its stop token. With --no-stop no
token stops a completion: all 64 run to the budget (the batch never thins out as rows finish).

    python bench/engine_throughput.py hf|vllm|auto [MAX_NEW_TOKENS] [--no-stop]     (docs/performance.md)"""

import sys
import time

from aha.config import load_config
from aha.models import load
from aha.models.compute import resolve_dtype
from aha.rollout import build_engine
from aha.tasks import build_task, encode_prompts


def main(engine_name: str, max_new_tokens: int = 128, stop: bool = True) -> None:
    config = load_config("configs/quickstart.yaml", [f"rollout.engine={engine_name}",
                                                     f"rollout.max_new_tokens={max_new_tokens}"])
    lm = load(config.model)
    task = build_task(config.task, config.base_dir)
    engine = build_engine(config.rollout, lm.model, lm.tokenizer, resolve_dtype(config.train.dtype), seed=config.seed)
    if not stop:
        engine.eos_ids = []
    try:
        for label, n_prompts, group in (("8x8", 8, 8), ("64x1", 64, 1)):
            prompts = encode_prompts(lm.tokenizer, task, task.train[:n_prompts])
            engine.generate(prompts[:2], group_size=2, max_new_tokens=4)  # warm-up
            for rep in range(2):
                t0 = time.perf_counter()
                rollouts = engine.generate(prompts, group_size=group)
                seconds = time.perf_counter() - t0
                tokens = float(rollouts.completion_mask.sum())
                print(f"{engine_name} {label} repeat {rep + 1}: {tokens:.0f} tokens in {seconds:.1f} s = "
                      f"{tokens / seconds:.0f} tokens/s", flush=True)
    finally:
        engine.close()


if __name__ == "__main__":  # the vLLM engine's worker is a process of its own
    flags = [arg for arg in sys.argv[1:] if arg.startswith("--")]
    if set(flags) - {"--no-stop"}:
        sys.exit(f"unknown option {sorted(set(flags) - {'--no-stop'})[0]}; usage: {__doc__.splitlines()[-1].strip()}")
    args = [arg for arg in sys.argv[1:] if not arg.startswith("--")]
    main(args[0] if args else "auto", int(args[1]) if len(args) > 1 else 128, stop="--no-stop" not in flags)
