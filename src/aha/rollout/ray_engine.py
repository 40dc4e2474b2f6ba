"""Sampling on Ray: rollout workers are Ray actors, each holding an HF engine over its own
copy of the policy; the learner stays in the driver.

Each generate call splits the prompts into one contiguous share per worker (whole groups:
a prompt's G samples stay on one worker, which prefills the prompt once), samples the shares
in parallel and puts the results back in prompt order. After an optimizer step the
policy's weights (LoRA adapters folded in) go once into Ray's object store and every
worker loads them from there before its next sample.

A worker that dies is noticed when its share is collected: that share is drawn again, whole,
on a worker still alive (or a new one when none is), and the dead one is replaced for later
steps; one warning line says so. A share is counted only once, from the worker that
finished it, so no sample is counted twice or lost.

Workers are built from the model's config and tokenizer (no model files needed where they
run) and get their weights from the driver, in fp32: the same numbers the learner holds, so
their sampling log-probs are the learner's as with the in-process engine.
"""

from __future__ import annotations

import logging
import os
import time

import torch

from aha.models.adapters import merged_state_dict
from aha.rollout.rollouts import Rollouts, concat_rollouts
from aha.rollout.settings import EngineSettings

log = logging.getLogger(__name__)

# a dead worker's share is drawn again at most this many times in one generate call
MAX_REDRAWS = 3


class RayUnavailable(RuntimeError):
    pass


def _ray():
    try:
        import ray
    except ImportError as err:
        raise RayUnavailable("ray.rollout_workers > 0 needs Ray: pip install 'aha[ray]' (ray==2.60.0)") from err
    return ray


def start_ray(address: str | None, object_store_mb: int, num_cpus: int | None = None) -> None:
    """Join the cluster at `address`, or start a local one (object store capped at
    object_store_mb); nothing when this process is already connected."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=True)
        return
    # Ray's own defaults take 30% of memory for the object store and start a dashboard
    ray.init(num_cpus=num_cpus or os.cpu_count(), object_store_memory=object_store_mb << 20,
             include_dashboard=False, log_to_driver=True, configure_logging=False)


class RolloutWorker:
    """What a Ray rollout actor runs: an HF engine over a model made from the policy's config."""

    def __init__(self, model_config, tokenizer, settings: dict, threads: int):
        from transformers import AutoModelForCausalLM

        from aha.rollout.hf_engine import HFEngine

        torch.set_num_threads(threads)
        model = AutoModelForCausalLM.from_config(model_config, dtype=torch.float32).eval()
        model.requires_grad_(False)
        self.engine = HFEngine(model, tokenizer, **settings)
        self.version = -1

    def load_weights(self, state: dict[str, torch.Tensor], version: int) -> int:
        self.engine.model.load_state_dict(state, strict=True)
        self.version = version
        return os.getpid()

    def generate(self, prompts: list[list[int]], group_size: int, greedy: bool, max_new_tokens: int | None,
                 seed: int) -> Rollouts:
        torch.manual_seed(seed)
        return self.engine.generate(prompts, group_size, greedy, max_new_tokens)

    def pid(self) -> int:
        return os.getpid()


class RayEngine(EngineSettings):
    """The Engine protocol over `workers` Ray rollout actors (see the module's docstring)."""

    def __init__(self, model, tokenizer, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                 batch_size: int = 64, dtype: torch.dtype = torch.float32, workers: int = 2, seed: int = 0,
                 address: str | None = None, object_store_mb: int = 1024, worker_threads: int = 1):
        super().__init__(model, tokenizer, max_new_tokens, temperature, top_p, batch_size, dtype)
        self.ray = _ray()
        start_ray(address, object_store_mb)
        self.seed, self.calls, self.version, self.threads = seed, 0, 0, worker_threads
        self.redrawn = 0  # shares drawn again after a worker died, over the engine's life
        self._settings = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                              batch_size=batch_size, dtype=dtype)
        self._remote = self.ray.remote(num_cpus=worker_threads, max_restarts=0)(RolloutWorker)
        self._weights = None  # the object-store copy of the newest weights
        self.actors = [self._new_actor() for _ in range(workers)]
        self._stale = True

    def _new_actor(self):
        return self._remote.remote(self.model.config, self.tokenizer, self._settings, self.threads)

    def sync_weights(self, model) -> None:
        """Workers load the model's current weights before their next sample (one copy in
        the object store for all of them)."""
        if model is not self.model:
            raise ValueError("RayEngine follows the model it was built on; build a new engine for another model")
        self._stale = True

    def _push(self, actors) -> None:
        t0 = time.perf_counter()
        if self._stale:
            self.version += 1
            state = {k: v.detach().float().contiguous() for k, v in merged_state_dict(self.model).items()}
            self._weights = self.ray.put(state)
            self._stale = False
        loads = [(actor, actor.load_weights.remote(self._weights, self.version)) for actor in actors]
        self.sync_seconds += time.perf_counter() - t0  # (a replacement's load below counts itself)
        for actor, ref in loads:
            t0 = time.perf_counter()
            try:
                self.ray.get(ref)
                self.sync_seconds += time.perf_counter() - t0
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.ActorDiedError) as err:
                slot, _ = self._replace(actor)
                log.warning("rollout worker %s died before loading the new weights (%s); a new worker took its place",
                            slot, type(err).__name__)

    def generate(self, prompts: list[list[int]], group_size: int = 1, greedy: bool = False,
                 max_new_tokens: int | None = None) -> Rollouts:
        if self._stale:
            self._push(self.actors)
        self.calls += 1
        count = len(self.actors)
        bounds = [round(i * len(prompts) / count) for i in range(count + 1)]
        shares = [(bounds[i], bounds[i + 1]) for i in range(count) if bounds[i + 1] > bounds[i]]
        seeds = [hash((self.seed, self.calls, index)) % (1 << 62) for index in range(len(shares))]
        pending = {index: (self.actors[index], self._submit(self.actors[index], prompts, share, group_size, greedy,
                                                              max_new_tokens, seeds[index]))
                   for index, share in enumerate(shares)}
        done: dict[int, Rollouts] = {}
        attempts = dict.fromkeys(pending, 0)
        while pending:
            index, (actor, ref) = next(iter(pending.items()))
            try:
                done[index] = self.ray.get(ref)
                del pending[index]
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.ActorDiedError) as err:
                attempts[index] += 1
                if attempts[index] > MAX_REDRAWS:
                    raise RuntimeError(f"rollout share {index} failed on {MAX_REDRAWS + 1} workers in a row; "
                                       f"last error: {err}") from None
                slot, substitute = self._replace(actor)
                start, end = shares[index]
                log.warning("rollout worker %s died during sampling (%s); its %d prompts x %d samples are drawn "
                            "again on a new worker", slot, type(err).__name__, end - start, group_size)
                self.redrawn += 1
                pending[index] = (substitute, self._submit(substitute, prompts, shares[index], group_size, greedy,
                                                           max_new_tokens, seeds[index] + attempts[index]))
        rollouts = concat_rollouts([done[i] for i in range(len(shares))], self.pad_id)
        rollouts.prompt_index = torch.arange(len(prompts)).repeat_interleave(group_size)
        return rollouts

    def _submit(self, actor, prompts, share, group_size, greedy, max_new_tokens, seed):
        start, end = share
        return actor.generate.remote(prompts[start:end], group_size, greedy, max_new_tokens, seed)

    def _replace(self, dead):
        """A new actor in the dead one's place, loaded with the current weights: (slot, actor)."""
        slot = next((i for i, actor in enumerate(self.actors) if actor is dead), None)
        fresh = self._new_actor()
        self._push([fresh])
        if slot is not None:
            self.actors[slot] = fresh
        return slot, fresh

    def close(self) -> None:
        for actor in getattr(self, "actors", []):
            try:
                self.ray.kill(actor)
            except Exception:  # already gone
                pass
        self.actors = []
