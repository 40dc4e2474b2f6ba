"""`aha train` on its learner ranks: in this process, as one of torchrun's ranks, on N ranks
it starts with torchrun (distributed.processes), or on N Ray actors (ray.learner_workers).

On Ray (`ray.learner_workers: N`) the ranks are the same ranks torchrun would start
(training/distributed.py, training/run.py), placed by Ray as actors, so that one config runs rollout
workers, reward workers and learner ranks on one cluster. The process group is set up here:
rank 0's actor names its node's address and a free port, every actor joins it (gloo on CPU,
NCCL on CUDA), and each runs `train` on the config. The driver waits for all of them; the first
that fails (an exception, or an actor that died) stops the others, and is named with its error."""

from __future__ import annotations

import os
import socket
import sys

from aha.config import Config, ConfigError
from aha.ray_cluster import kill_actor, ray_module, release_ray, start_ray


def train_on_ranks(config: Config, argv: list[str], env: dict | None = None, own_session: bool = False) -> int:
    """Train config: here (one process, or a rank of a torchrun already running), else on the
    learner ranks the config asks for. argv: this command's arguments, run again on each rank;
    env: the ranks' environment (default: this process's); own_session: see launch_ranks. Returns
    the exit status (torchrun's, where it started the ranks)."""
    if config.distributed.processes > 1 and "WORLD_SIZE" not in os.environ:
        return launch_ranks(config.distributed.processes, argv, env, own_session)
    if config.ray.learner_workers > 1:
        train_on_ray(config)
        return 0
    from aha.training.loop import train

    if "WORLD_SIZE" in os.environ:  # a torchrun rank: a failure's message and traceback go to torchrun's report
        from torch.distributed.elastic.multiprocessing.errors import record

        train = record(train)
    train(config)
    return 0


def launch_ranks(processes: int, argv: list[str], env: dict | None = None, own_session: bool = False) -> int:
    """`aha train` with distributed.processes=N: the same command on N learner ranks, started by
    torchrun on this machine (its rendezvous on a free local port). Returns torchrun's exit
    status; a rank that fails is named in torchrun's report, with its error. own_session: torchrun
    in a session of its own, which no terminal's Ctrl-C reaches, so this process passes SIGINT on
    too (a notebook's interrupt reaches its kernel alone)."""
    import subprocess

    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
               "-m", "aha.cli", *argv]
    print(f"starting {processes} learner ranks: {' '.join(command[1:])}", flush=True)
    # own_session: no terminal's signal reaches torchrun, so it must end with this process (a
    # notebook's kernel that dies or restarts) rather than train on alone
    dies_with_us = _die_with_parent if own_session and sys.platform.startswith("linux") else None
    child = subprocess.Popen(command, env=env, start_new_session=own_session, preexec_fn=dies_with_us)
    status, stopped_by = wait_passing_signals(child, own_session)
    if status and stopped_by is not None:  # the ranks stopped as told, each saying so: not a failure
        return 128 + stopped_by
    if status:
        print(f"aha train: the learner ranks stopped (exit status {status}); torchrun's report above names the rank "
              "that failed first and its error. train.resume=true continues from the last checkpoint", file=sys.stderr)
    return status


def _die_with_parent() -> None:
    """In torchrun's process before it starts: SIGTERM it when its parent dies (Linux's prctl)."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1


def wait_passing_signals(child, pass_sigint: bool = False) -> tuple[int, int | None]:
    """Wait for torchrun (returns its exit status and the first stop signal this process got, or
    None), passing on SIGTERM and SIGHUP (sent to this process alone by `timeout`,
    Kubernetes or a closed terminal): torchrun sends them to its ranks, which stop as on Ctrl-C. Ctrl-C
    itself reaches torchrun and the ranks from the terminal; this process neither kills torchrun for it
    (as subprocess.call would) nor sends a second one, which would make the ranks stop at once, unless
    pass_sigint (torchrun in a session of its own, which the terminal's Ctrl-C does not reach)."""
    import signal

    from aha.training.interrupt import STOP_SIGNALS, heeded

    stopped_by: list[int] = []

    def pass_on(signum, frame):
        stopped_by.append(signum)
        if signum != signal.SIGINT or pass_sigint:
            child.send_signal(signum)

    # none off the main thread (Python handles signals there only); nohup's SIGHUP stays ignored
    previous = {s: signal.signal(s, pass_on) for s in heeded(STOP_SIGNALS)}
    try:
        return child.wait(), (stopped_by[0] if stopped_by else None)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# what a rank's actor takes from the driver's environment (the kill tests' fault injection)
PASSED_ON = ("AHA_KILL_AT", "AHA_STALL_AT", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM")


class LearnerRankFailed(RuntimeError):
    """A learner rank's actor raised or died; the others were stopped."""


class LearnerRank:
    """One learner rank in its own Ray actor process."""

    def address(self) -> tuple[str, int]:
        """This node's address and a port free on it, for the process group's rendezvous."""
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        return ray_module().util.get_node_ip_address(), port

    def train(self, config: Config, env: dict[str, str]) -> None:
        os.environ.update(env)
        from aha.training.loop import train

        train(config, echo=print if env["RANK"] == "0" else (lambda *_: None))


def rank_env(rank: int, world_size: int, master: str, port: int) -> dict[str, str]:
    """torchrun's variables for one rank (each actor sees only the devices Ray gave it: local rank 0)."""
    passed = {key: os.environ[key] for key in PASSED_ON if key in os.environ}
    return {**passed, "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": master, "MASTER_PORT": str(port)}


def on_ray_devices(config: Config, ray, n: int) -> Config:
    """config with the device the n ranks take on this cluster: cuda (a GPU each) for cuda, or
    for auto where the cluster has a GPU for each rank; else cpu (an actor Ray gave no GPU must
    not pick one up). device: cuda on a cluster with fewer GPUs is an error: the actors would
    wait for GPUs forever."""
    gpus = ray.cluster_resources().get("GPU", 0)
    if config.device == "cuda" and gpus < n:
        raise ConfigError(f"device: cuda with ray.learner_workers={n}: the Ray cluster has {gpus:g} GPU(s), one a "
                          "rank is needed")
    on_gpus = config.device == "cuda" or (config.device == "auto" and gpus >= n)
    return config.model_copy(update={"device": "cuda" if on_gpus else "cpu"})


def train_on_ray(config: Config) -> None:
    """Run config's training on ray.learner_workers learner ranks, each a Ray actor with
    ray.worker_threads CPUs and, on GPUs, one GPU (Ray shows each actor only its own: cuda:0).
    Paths are made absolute first: an actor's working folder is not this one. Raises
    LearnerRankFailed naming the first rank that failed."""
    ray = ray_module()
    n = config.ray.learner_workers
    config = config.model_copy(update={"base_dir": os.path.abspath(config.base_dir),
                                       "output_dir": os.path.abspath(config.output_dir)})
    start_ray(config.ray, num_cpus=max(os.cpu_count() or 1, n * config.ray.worker_threads))
    actors = []
    try:
        config = on_ray_devices(config, ray, n)
        remote = ray.remote(num_cpus=config.ray.worker_threads, num_gpus=int(config.device == "cuda"),
                            max_restarts=0)(LearnerRank)
        actors = [remote.remote() for _ in range(n)]
        master, port = ray.get(actors[0].address.remote())
        runs = {actor.train.remote(config, rank_env(rank, n, master, port)): rank for rank, actor in enumerate(actors)}
        pending = list(runs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                ray.get(done[0])
            except Exception as err:  # an exception in train, or the actor's process gone
                for actor in actors:  # the others would wait for it in their collectives
                    kill_actor(actor)
                raise LearnerRankFailed(f"learner rank {runs[done[0]]} of {n} (a Ray actor) failed: "
                                        f"{type(err).__name__}: {err}") from None
    finally:
        for actor in actors:
            kill_actor(actor)
        release_ray()
