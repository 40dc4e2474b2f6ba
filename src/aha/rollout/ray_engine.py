"""Sampling on Ray: rollout workers are Ray actors, each holding an HF engine over its own
copy of the policy; the learner stays in the driver.

Each generate call splits the prompts into one contiguous share per worker (whole groups:
a prompt's G samples stay on one worker, which prefills the prompt once), samples the shares
in parallel and puts the results back in prompt order. After an optimizer step the
policy's weights (LoRA adapters folded in) go once into Ray's object store and every
worker loads them from there before its next sample.

A worker that dies is noticed when its share is collected: a new worker takes its place,
gets the current weights, and draws that share again, whole, with the same seed; one warning
line says so. A share is counted only once, from the worker that
finished it, so no sample is counted twice or lost.

Workers are built from the model's config and tokenizer (no model files needed where they
run) and get their weights from the driver, in fp32: the same numbers the learner holds, so
their sampling log-probs are the learner's as with the in-process engine.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from aha.config import RayConfig
from aha.models.adapters import plain_tensors
from aha.ray_cluster import RayUnavailable, kill_actor, ray_module, start_ray
from aha.rollout.ray_worker import RolloutWorker
from aha.rollout.rollouts import PartialRound, Rollouts, concat_rollouts
from aha.rollout.settings import EngineSettings

log = logging.getLogger(__name__)

# a dead worker's share is drawn again at most this many times in one generate call
MAX_REDRAWS = 3


@dataclass
class Submitted:
    """A sampling request in flight on the workers (RayEngine.submit)."""

    calls: list[tuple[str, tuple]]  # each share's worker method and arguments (its seed aside)
    sizes: list[int]  # each share's samples
    prompt_index: torch.Tensor  # (N,) of the whole request, in share order
    seeds: list[int]
    pending: dict  # share index -> (actor, object ref)


class RayEngine(EngineSettings):
    """The Engine protocol over `workers` Ray rollout actors (see the module's docstring)."""

    def __init__(self, model, tokenizer, max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0,
                 batch_size: int = 64, dtype: torch.dtype = torch.float32, workers: int = 2, seed: int = 0,
                 cluster: RayConfig | None = None, worker_threads: int = 1, vllm_python: Path | None = None):
        super().__init__(model, tokenizer, max_new_tokens, temperature, top_p, batch_size, dtype)
        self.ray = ray_module()
        start_ray(cluster)
        # version: how many sets of weights have been handed over
        self.seed, self.version, self.threads = seed, 0, worker_threads
        self.vllm_python = None if vllm_python is None else str(vllm_python)
        self.redrawn = 0  # shares drawn again after a worker died, over the engine's life
        self._settings = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                              batch_size=batch_size, dtype=dtype)
        self._remote = self.ray.remote(num_cpus=worker_threads, max_restarts=0)(RolloutWorker)
        self._weights = None  # the object-store copy of the newest weights
        total = self.ray.cluster_resources().get("CPU", 0)
        if total < workers * worker_threads:  # actors that can never be placed would wait forever
            raise RayUnavailable(f"ray.rollout_workers={workers} x ray.worker_threads={worker_threads} need "
                                 f"{workers * worker_threads} CPUs; the Ray cluster has {total:g}")
        self._started = 0
        self._loads: dict[int, tuple] = {}  # slot -> (actor, its weight load's ref), not yet checked
        self.actors = [self._new_actor(slot) for slot in range(workers)]
        self._stale = True

    def _new_actor(self, slot: int):
        started = self._started
        self._started += 1  # each vLLM worker seeds its own stream; its slot picks its CPUs
        return self._remote.remote(self.model.config, self.tokenizer, self._settings, self.threads, self.eos_ids,
                                   self.vllm_python, self.seed + started, slot)

    def sync_weights(self, model) -> None:
        """Workers load the model's current weights before their next sample (one copy in
        the object store for all of them)."""
        if model is not self.model:
            raise ValueError("RayEngine follows the model it was built on; build a new engine for another model")
        self._stale = True

    def _push(self, actors, wait: bool = True) -> None:
        """Hand the newest weights to actors. wait=False only queues the loads (an actor runs
        its calls in order, so its next sample uses them); collect() checks them."""
        t0 = time.perf_counter()
        if self._stale:
            self.version += 1
            # the previous copy leaves the object store first: two of them would not fit a store
            # sized for one, and Ray would spill one to disk
            self._weights = None
            # as numpy arrays: Ray writes them into the store in one copy and workers read them
            # in place (torch tensors were pickled: 0.9 s to put 540 MB, 0.8 s a worker to load);
            # a tied output layer shares the embedding's array, stored once
            arrays = {}
            state = {name: arrays.setdefault(id(tensor), tensor.numpy())
                     for name, tensor in plain_tensors(self.model, torch.float32).items()}
            self._weights = self.ray.put(state)
            self._stale = False
        if not wait:
            for actor in actors:
                self._loads[self._slot(actor)] = (actor, actor.load_weights.remote(self._weights))
            self.sync_seconds += time.perf_counter() - t0
            return
        for actor in actors:
            error = self._loaded(actor)
            if error is not None:
                log.warning("rollout worker %s died before loading the new weights (%s); a new worker takes its place",
                            self._slot(actor), error)
                self._replace(actor)
        self.sync_seconds += time.perf_counter() - t0

    def _loaded(self, actor, ref=None) -> str | None:
        """Hand the current weights to actor (or wait for the load `ref` already queued);
        None when done, else why the actor is gone. A load that fails in a live actor raises."""
        try:
            self.ray.get(ref if ref is not None else actor.load_weights.remote(self._weights))
            return None
        except self.ray.exceptions.RayActorError as err:  # ActorDiedError and the like
            lines = str(err).strip().splitlines()
            return lines[-1] if lines else type(err).__name__
        except self.ray.exceptions.RayTaskError as err:
            raise RuntimeError(f"a rollout worker could not load the policy's weights: {err}") from None

    def _slot(self, actor) -> int | None:
        return next((i for i, a in enumerate(self.actors) if a is actor), None)

    def generate(self, prompts: list[list[int]], group_size: int = 1, greedy: bool = False,
                 max_new_tokens: int | None = None, temperature: float | None = None) -> Rollouts:
        return self.collect(self.submit(prompts, group_size, greedy, max_new_tokens, temperature))

    def submit(self, prompts: list[list[int]], group_size: int = 1, greedy: bool = False,
               max_new_tokens: int | None = None, temperature: float | None = None) -> Submitted:
        """Start sampling (on the workers' current weights, the newest handed over first)
        and return at once; collect() waits for the result. Asynchronous training samples
        the next step so while the learner updates."""
        count = len(self.actors)
        bounds = [round(i * len(prompts) / count) for i in range(count + 1)]
        shares = [(bounds[i], bounds[i + 1]) for i in range(count) if bounds[i + 1] > bounds[i]]
        calls = [("generate", (prompts[start:end], group_size, greedy, max_new_tokens, temperature))
                 for start, end in shares]
        return self._start(calls, [(end - start) * group_size for start, end in shares],
                           torch.arange(len(prompts)).repeat_interleave(group_size))

    def generate_partial(self, prompts: list[list[int]], plan: PartialRound) -> Rollouts:
        return self.collect(self.submit_partial(prompts, plan))

    def submit_partial(self, prompts: list[list[int]], plan: PartialRound) -> Submitted:
        """submit() for a round that may stop early (partial rollouts): each worker takes whole
        groups and stops once its share of plan.enough is complete (partial_shares), so that
        the round holds at least plan.enough complete groups."""
        calls, sizes = [], []
        for start, end, enough in partial_shares(plan, len(self.actors)):
            share = PartialRound(plan.copies[start:end], plan.budgets[start:end], plan.groups[start:end], enough)
            calls.append(("generate_partial", (prompts[start:end], share)))
            sizes.append(sum(share.copies))
        return self._start(calls, sizes, torch.arange(len(prompts)).repeat_interleave(torch.tensor(plan.copies)))

    def _start(self, calls: list[tuple[str, tuple]], sizes: list[int], prompt_index: torch.Tensor) -> Submitted:
        if self._stale:
            self._push(self.actors, wait=False)
        # from the driver's RNG, which checkpoints save: a resumed run draws what a straight one would
        base = int(torch.randint(0, 1 << 62, (1,)))
        seeds = [base + index for index in range(len(calls))]
        pending = {index: (self.actors[index], self._submit(self.actors[index], call, seeds[index]))
                   for index, call in enumerate(calls)}
        return Submitted(calls, sizes, prompt_index, seeds, pending)

    def collect(self, submitted: Submitted) -> Rollouts:
        """The rollouts of a submit() call, in prompt order; a share whose worker died is
        drawn again, whole, on a new worker."""
        pending, done = submitted.pending, {}
        attempts = dict.fromkeys(pending, 0)
        # the weight loads submit queued on this request's workers (others may still be busy)
        involved = {self._slot(actor) for actor, _ in pending.values()}
        loads = [self._loads.pop(slot) for slot in involved if slot in self._loads]
        if loads:  # queued by submit: the time the slowest worker took to take the weights
            t0 = time.perf_counter()
            for actor, ref in loads:
                self._loaded(actor, ref)  # a dead actor: its share below fails too, and is drawn again
            self.sync_seconds += time.perf_counter() - t0
        while pending:
            index, (actor, ref) = next(iter(pending.items()))
            try:
                done[index] = self.ray.get(ref)
                del pending[index]
            except self.ray.exceptions.RayActorError as err:  # ActorDiedError and the like
                attempts[index] += 1
                if attempts[index] > MAX_REDRAWS:
                    raise RuntimeError(f"rollout share {index} failed on {MAX_REDRAWS + 1} workers in a row; "
                                       f"last error: {err}") from None
                slot, substitute = self._slot(actor), self._replace(actor)
                log.warning("rollout worker %s died during sampling (%s); its share, %d samples, is drawn again "
                            "on a new worker", slot, type(err).__name__, submitted.sizes[index])
                self.redrawn += 1
                # the same seed: the share is what it would have been had the worker lived
                pending[index] = (substitute, self._submit(substitute, submitted.calls[index], submitted.seeds[index]))
        rollouts = concat_rollouts([done[i] for i in range(len(submitted.calls))], self.pad_id)
        rollouts.prompt_index = submitted.prompt_index
        return rollouts

    def _submit(self, actor, call: tuple[str, tuple], seed: int):
        method, args = call
        return getattr(actor, method).remote(*args, seed)

    def _replace(self, dead):
        """A new actor in the dead one's place (killed, if it is only unreachable), loaded
        with the current weights; returns it. Gives up after MAX_REDRAWS new ones died too."""
        slot = self._slot(dead)
        kill_actor(dead)
        error = None
        for _ in range(MAX_REDRAWS):
            fresh = self._new_actor(slot or 0)
            if slot is not None:
                self.actors[slot] = fresh
                self._loads.pop(slot, None)
            error = None if self._weights is None else self._loaded(fresh)
            if error is None:
                return fresh
            kill_actor(fresh)
        raise RuntimeError(f"rollout worker {slot}: {MAX_REDRAWS} new workers in a row died before loading the "
                           f"weights; the last: {error}")

    def close(self) -> None:
        actors = getattr(self, "actors", [])
        # let each engine close what it started (a vLLM process) before the actor goes
        closing = [actor.close.remote() for actor in actors]
        try:
            self.ray.wait(closing, num_returns=len(closing), timeout=30)
        except Exception:  # a dead actor: nothing of its own left to close
            pass
        for actor in actors:
            kill_actor(actor)
        self.actors = []


def partial_shares(plan: PartialRound, workers: int) -> list[tuple[int, int, int]]:
    """(start, end, enough) for each worker: contiguous prompts cut only between groups, about
    the same number of samples each, and plan.enough split over them in proportion to their
    groups (largest remainders; each at most its own groups), adding up to plan.enough.
    Workers do not count each other's groups: each stops at its own share."""
    total = sum(plan.copies)
    cuts, rows = [0], 0
    for i in range(1, len(plan.copies)):
        rows += plan.copies[i - 1]
        # the next share starts at the first group boundary past its fair part of the samples
        if len(cuts) < workers and plan.groups[i] != plan.groups[i - 1] and rows >= len(cuts) * total / workers:
            cuts.append(i)
    cuts.append(len(plan.copies))
    spans = [(cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)]
    groups = [len(set(plan.groups[start:end])) for start, end in spans]
    exact = [plan.enough * count / sum(groups) for count in groups]
    enough = [min(count, math.floor(share)) for count, share in zip(groups, exact)]
    by_remainder = sorted(range(len(spans)), key=lambda i: exact[i] - enough[i], reverse=True)
    while sum(enough) < plan.enough:  # plan.enough <= all the groups: there is room somewhere
        i = next(i for i in by_remainder if enough[i] < groups[i])
        enough[i] += 1
        by_remainder.remove(i)
        by_remainder.append(i)
    return [(start, end, share) for (start, end), share in zip(spans, enough)]
