"""Reward workers on Ray (`ray.reward_workers: true`): a reward with `workers: N` runs on N
Ray actors instead of N local processes, with the same contract as rewards/pool.py: the
function is named by its path and resolved in each actor, every call has a deadline, and a
call past it (or whose actor died) scores as a failure while its actor is killed and
replaced, so one hung or crashing reward never stops the run. An actor killed at a deadline
has every process it started killed first (by a task on its node: kill_tree), as a worker's are."""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from pathlib import Path

from aha.config import RayConfig
from aha.ray_cluster import kill_actor, ray_module, start_ray
from aha.rewards.calls import TOKENS, Outcome, takes_tokens
from aha.rewards.functions import bind_args, resolve_function
from aha.rewards.pool import adopt_orphans, kill_tree

log = logging.getLogger(__name__)


class RewardActor:
    """What a Ray reward actor runs: one reward function, called one sample at a time."""

    def __init__(self, fn_path: str, args: dict, base_dir: str):
        self.fn, self.error = None, None
        try:
            fn = resolve_function(fn_path, base_dir=base_dir)
            self.fn = bind_args(fn, args, key="reward.args") if args else fn
        except Exception as err:  # noqa: BLE001 - reported by ready(), one line, not a Ray traceback
            self.error = f"{type(err).__name__}: {err}"
        self.given_tokens = self.fn is not None and takes_tokens(self.fn)

    def ready(self) -> str | None:
        """None when the function is ready, else why it is not."""
        return self.error

    def place(self, driver_pid: int) -> tuple[str, int] | None:
        """(node id, pid) of this actor's process, which from now on keeps the processes its
        reward starts under it (adopt_orphans), for kill_tree; None when it runs in the driver's
        process (a stand-in for Ray in tests), whose processes are not the pool's to kill."""
        if os.getpid() == driver_pid:
            return None
        import ray

        adopt_orphans()
        return ray.get_runtime_context().get_node_id(), os.getpid()

    def call(self, completion: str, sample: dict, completion_tokens: int | None = None) -> Outcome:
        kwargs = {TOKENS: completion_tokens} if self.given_tokens and completion_tokens is not None else {}
        try:
            return Outcome(value=self.fn(completion, sample, **kwargs))
        except Exception as err:  # noqa: BLE001 - scored as failed by the caller
            return Outcome(error=f"{type(err).__name__}: {err}")


class RayRewardPool:
    """WorkerPool's interface (map, close, restarts) on Ray actors. The actors ask Ray for no
    CPU (num_cpus=0): a reward call mostly waits (a sandboxed process, a remote judge), and
    rollout workers holding every CPU of a small cluster must not keep them from starting."""

    STARTUP_S = 120.0

    def __init__(self, fn_path: str, args: dict, base_dir: str | Path, workers: int, timeout_s: float,
                 cluster: RayConfig | None = None):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.spec = (fn_path, dict(args), str(base_dir))
        self.size, self.timeout_s = workers, timeout_s
        self.cluster = cluster
        self.actors: list = []
        self.places: list[tuple[str, int] | None] = []  # each actor's (node id, pid), for kill_tree
        self.restarts = 0  # actors killed at a deadline or found dead
        self.ray = None

    def _start(self):
        if self.ray is None:
            self.ray = ray_module()
            start_ray(self.cluster)
        actor = self.ray.remote(num_cpus=0, max_restarts=0)(RewardActor).remote(*self.spec)
        try:
            error = self.ray.get(actor.ready.remote(), timeout=self.STARTUP_S)
        except Exception as err:  # the actor itself could not start (or not in time)
            error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        if error is not None:
            kill_actor(actor)
            raise RuntimeError(f"a reward worker could not start: {error}")
        return actor, self.ray.get(actor.place.remote(os.getpid()), timeout=self.STARTUP_S)

    def _kill_tree(self, slot: int) -> None:
        """Kill the actor's process and all it started, from a task on its node (the driver may
        run elsewhere); the actor itself is killed through Ray next, whatever happens here."""
        if self.places[slot] is None:
            return
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node, pid = self.places[slot]
        task = self.ray.remote(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
        try:
            self.ray.get(task(kill_tree).remote(pid), timeout=self.STARTUP_S)
        except Exception as err:  # noqa: BLE001 - the node may be gone with the actor
            log.warning("could not kill the processes of a timed-out reward worker: %s: %s", type(err).__name__, err)

    def map(self, completions: list[str], samples: list[dict],
            completion_tokens: list[int] | None = None) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(completions)
        tokens = [None] * len(completions) if completion_tokens is None else completion_tokens
        while len(self.actors) < min(self.size, len(completions)):
            actor, place = self._start()
            self.actors.append(actor)
            self.places.append(place)
        pending = deque(range(len(completions)))
        running: dict = {}  # object ref -> (actor slot, sample index, deadline)
        idle = deque(range(len(self.actors)))
        while pending or running:
            while idle and pending:
                slot, index = idle.popleft(), pending.popleft()
                ref = self.actors[slot].call.remote(completions[index], samples[index], tokens[index])
                running[ref] = (slot, index, time.monotonic() + self.timeout_s)
            wait_s = max(0.0, min(deadline for _, _, deadline in running.values()) - time.monotonic())
            self.ray.wait(list(running), num_returns=1, timeout=wait_s)
            # every call that has finished is taken before any deadline is judged (a replacement's
            # start-up below must not turn a finished call into a timed-out one)
            ready, _ = self.ray.wait(list(running), num_returns=len(running), timeout=0)
            dead = []
            for ref in ready:
                slot, index, _ = running.pop(ref)
                try:
                    outcomes[index] = self.ray.get(ref)
                    idle.append(slot)
                except self.ray.exceptions.RayActorError as err:
                    outcomes[index] = Outcome(error=f"the worker died ({type(err).__name__})")
                    dead.append(slot)
                except self.ray.exceptions.RayError as err:  # e.g. a value Ray could not move: this sample only
                    outcomes[index] = Outcome(error=f"{type(err).__name__}: {str(err).splitlines()[0]}")
                    idle.append(slot)
            now = time.monotonic()
            for ref, (slot, index, deadline) in list(running.items()):
                if now >= deadline:
                    del running[ref]
                    outcomes[index] = Outcome(error=f"timed out after {self.timeout_s:g} s")
                    self._kill_tree(slot)
                    dead.append(slot)
            for slot in dead:
                self._replace(slot)
                idle.append(slot)
        return outcomes

    def _replace(self, slot: int) -> None:
        kill_actor(self.actors[slot])
        self.restarts += 1
        self.actors[slot], self.places[slot] = self._start()

    def close(self) -> None:
        for actor in self.actors:
            kill_actor(actor)
        self.actors, self.places = [], []
