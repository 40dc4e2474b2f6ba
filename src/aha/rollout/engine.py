"""The seam between RL and inference: what every sampling engine provides (Engine), and the
one factory that picks an engine for a config (build_engine). Training, `aha eval` and the
pass@k study ask build_engine; nothing else names an engine class."""

from __future__ import annotations

import logging
from typing import Any, Protocol

import torch

from aha.config import RayConfig, RolloutConfig
from aha.rollout.rollouts import PartialRound, Rollouts

log = logging.getLogger(__name__)


class Engine(Protocol):
    """Samples completions for token-id prompts and reports what it sampled: the exact token
    ids, their log-probs under the sampling distribution, masks and decoded texts (Rollouts).

    An engine that holds its own copy of the weights (a vLLM server) must be given the
    policy's new weights after each optimizer step (sync_weights); one that samples from the
    policy's own modules does nothing there."""

    tokenizer: Any
    pad_id: int
    eos_ids: list[int]  # a completion ends at the first of these (included in its mask)
    batch_size: int  # sequences per generation call: memory, not results
    max_new_tokens: int
    sync_seconds: float  # time spent so far handing new weights to the engine (time/sync_s)

    def generate(self, prompts: list[list[int]], group_size: int = 1, greedy: bool = False,
                 max_new_tokens: int | None = None, temperature: float | None = None) -> Rollouts:
        """group_size completions of each prompt, consecutive in the output; greedy decodes
        one deterministic completion a prompt (evaluation); temperature overrides the
        engine's for this call."""
        ...

    def generate_partial(self, prompts: list[list[int]], plan: PartialRound) -> Rollouts:
        """A round that may stop early (partial rollouts): plan.copies[i] completions of
        prompt i with at most plan.budgets[i] tokens, stopping once plan.enough groups are
        complete; the completions still going come back as far as they got, marked in
        Rollouts.unfinished."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Sample from model's current weights from the next generate on."""
        ...

    def close(self) -> None:
        """Release what the engine holds outside this process (a worker); safe to call twice."""
        ...


# what rollout.engine may name besides auto, in the order auto prefers them (a test holds the
# config's allowed values to it)
ENGINES = ("vllm", "hf")

# auto samples with vLLM only for token budgets above this, and only for models the HF engine
# has no lean decoding step for (rollout/llama_decoding.py). Measured on a 2-core Zen 4, bf16,
# SmolLM2-135M, 64 sequences (docs/performance.md): with the lean step the HF engine sampled
# as fast as vLLM at 128 tokens counted to the stop (346-374 and 338-378 tokens/s) and 1.4-1.6x
# faster with all 64 rows running to the budget (128 tokens: 487-554 against 336-346; 256:
# 448-468 against 372-387); without it, vLLM was about 1.4x faster at 128 tokens and the two
# tied at 48. vLLM also costs a start (20-30 s) and a weight reload each step (0.5-0.7 s).
AUTO_VLLM_ABOVE_TOKENS = 64


def build_engine(rollout: RolloutConfig, model: torch.nn.Module, tokenizer, dtype: torch.dtype,
                 max_new_tokens: int | None = None, self_certainty: bool = False, seed: int = 0,
                 ray: RayConfig | None = None) -> Engine:
    """The engine rollout.engine names over model's weights; auto: vLLM for token budgets over
    AUTO_VLLM_ABOVE_TOKENS of a model the HF engine has no lean decoding step for, where an
    environment with it is found (rollout.vllm_python, $AHA_VLLM_PYTHON, or .venv-vllm beside
    aha's) and starts, else the HF engine.
    max_new_tokens overrides the rollout's (evaluation budgets);
    self_certainty makes the engine also report each token's self-certainty (best-of-N
    ranking), which needs every step's full logits: only the HF engine has them.
    ray with rollout_workers > 0: that many Ray actors sample (RayEngine), each with the HF
    engine, or vLLM when rollout.engine is vllm."""
    from aha.rollout.llama_decoding import LlamaDecoding
    from aha.rollout.vllm_engine import VLLMEngine, VLLMEngineError, vllm_python

    max_new = max_new_tokens or rollout.max_new_tokens
    if ray is not None and ray.rollout_workers:
        if self_certainty:
            raise ValueError("ray.rollout_workers cannot report self-certainty: evaluate in this process")
        from aha.rollout.ray_engine import RayEngine

        # rollout.engine=vllm: each worker runs vLLM (in its own environment); else the HF engine
        python = None
        if rollout.engine == "vllm":
            python = vllm_python(rollout.vllm_python)
            if python is None:
                raise VLLMEngineError("rollout.engine=vllm with ray.rollout_workers needs vLLM's environment "
                                      "(rollout.vllm_python, $AHA_VLLM_PYTHON, or `make vllm`)")
        return RayEngine(model, tokenizer, max_new, rollout.temperature, rollout.top_p, rollout.batch_size, dtype,
                         ray.rollout_workers, seed, ray, ray.worker_threads, python)
    vllm = lambda python: VLLMEngine(model, tokenizer, max_new, rollout.temperature, rollout.top_p,  # noqa: E731
                                     rollout.batch_size, dtype, python, seed)
    if rollout.engine == "vllm":
        if self_certainty:
            raise ValueError("rollout.engine=vllm cannot report self-certainty (it needs every step's full logits): "
                             "use rollout.engine=hf for self-certainty ranking")
        return vllm(vllm_python(rollout.vllm_python))
    # on a GPU the HF engine samples there: auto's vLLM (`make vllm`: a CPU build) is for the CPU
    on_cpu = next(model.parameters()).device.type == "cpu"
    if rollout.engine == "auto" and not self_certainty and max_new > AUTO_VLLM_ABOVE_TOKENS and on_cpu \
            and not LlamaDecoding.fits(model):
        python = vllm_python(rollout.vllm_python)
        if python is not None:
            try:
                return vllm(python)
            except VLLMEngineError as err:
                log.warning("rollout.engine=auto: vLLM at %s did not start, sampling with the HF engine instead: %s",
                            python, err)
    if rollout.engine in ("auto", "hf"):
        from aha.rollout.hf_engine import HFEngine

        return HFEngine(model, tokenizer, max_new, rollout.temperature, rollout.top_p, rollout.batch_size, dtype,
                        self_certainty=self_certainty)
    raise ValueError(f"rollout.engine: unknown engine {rollout.engine!r} (known: auto, {', '.join(ENGINES)})")
