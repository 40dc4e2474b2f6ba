"""What each Ray rollout actor runs (rollout/ray_engine.py starts them): an engine over a model
made from the policy's config, loading the driver's weights from the object store."""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import torch

from aha.rollout.rollouts import PartialRound, Rollouts


class RolloutWorker:
    """What a Ray rollout actor runs: an engine over a model made from the policy's config,
    the HF engine, or with vllm_python the vLLM engine (its own process, started from here)."""

    def __init__(self, model_config, tokenizer, settings: dict, threads: int, eos_ids: list[int],
                 vllm_python: str | None = None, seed: int = 0, index: int = 0):
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        model = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32).eval()
        model.requires_grad_(False)
        if vllm_python:
            from aha.rollout.vllm_engine import VLLMEngine

            # vLLM binds its threads to the CPUs it is told: this worker's own `threads` of them,
            # not every CPU of the machine for each worker (unless the user set them)
            cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count()))
            mine = [cpus[(index * threads + i) % len(cpus)] for i in range(min(threads, len(cpus)))]
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", ",".join(map(str, mine)))
            os.environ.setdefault("OMP_NUM_THREADS", str(threads))
            self.engine = VLLMEngine(model, tokenizer, **settings, python=Path(vllm_python), seed=seed)
        else:
            from aha.rollout.hf_engine import HFEngine

            self.engine = HFEngine(model, tokenizer, **settings)
        # the driver's stop ids: a model made from its config alone lacks the generation
        # config's extra end-of-turn ids
        self.engine.eos_ids = list(eos_ids)

    def stop_ids(self) -> list[int]:
        return self.engine.eos_ids

    def load_weights(self, state: dict) -> float:
        """state: name -> numpy array, read in place from the object store (Ray hands numpy
        arrays over without a copy; torch tensors it pickles) and copied into the weights.
        Returns the seconds it took."""
        t0 = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # from_numpy of a read-only array: only read here
            self.engine.model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
        self.engine.sync_weights(self.engine.model)  # vLLM: handed to its process at the next generate
        return time.perf_counter() - t0

    def describe(self) -> tuple[str, int | None]:
        """The engine's class, and the pid of the process it started (vLLM's), if any."""
        process = getattr(self.engine, "_proc", None)
        return type(self.engine).__name__, None if process is None else process.pid

    def close(self) -> None:
        self.engine.close()

    def generate(self, prompts: list[list[int]], group_size: int, greedy: bool, max_new_tokens: int | None,
                 temperature: float | None, seed: int) -> Rollouts:
        torch.manual_seed(seed)
        return self.engine.generate(prompts, group_size, greedy, max_new_tokens, temperature)

    def generate_partial(self, prompts: list[list[int]], plan: PartialRound, seed: int) -> Rollouts:
        torch.manual_seed(seed)
        return self.engine.generate_partial(prompts, plan)

    def pid(self) -> int:
        return os.getpid()
