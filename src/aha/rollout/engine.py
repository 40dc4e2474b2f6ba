"""The seam between RL and inference: what every sampling engine provides (Engine), and the
one factory that picks an engine for a config (build_engine). Training, `aha eval` and the
pass@k study ask build_engine; nothing else names an engine class."""

from __future__ import annotations

from typing import Any, Protocol

import torch

from aha.config import RolloutConfig
from aha.rollout.rollouts import Rollouts


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

    def generate(self, prompts: list[list[int]], group_size: int = 1, greedy: bool = False,
                 max_new_tokens: int | None = None) -> Rollouts:
        """group_size completions of each prompt, consecutive in the output; greedy decodes
        one deterministic completion a prompt (evaluation)."""
        ...

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Sample from model's current weights from now on."""
        ...


# what rollout.engine may name besides auto, in the order auto prefers them (a test holds the
# config's allowed values to it)
ENGINES = ("hf",)


def build_engine(rollout: RolloutConfig, model: torch.nn.Module, tokenizer, dtype: torch.dtype,
                 max_new_tokens: int | None = None, self_certainty: bool = False) -> Engine:
    """The engine rollout.engine names (auto: the fastest one installed) over model's weights.
    max_new_tokens overrides the rollout's (evaluation budgets); self_certainty makes the
    engine also report each token's self-certainty (best-of-N ranking)."""
    name = "hf" if rollout.engine == "auto" else rollout.engine
    if name == "hf":
        from aha.rollout.hf_engine import HFEngine

        return HFEngine(model, tokenizer, max_new_tokens or rollout.max_new_tokens, rollout.temperature, rollout.top_p,
                        rollout.batch_size, dtype, self_certainty=self_certainty)
    raise ValueError(f"rollout.engine: unknown engine {rollout.engine!r} (known: auto, {', '.join(ENGINES)})")
