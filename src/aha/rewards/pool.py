"""A bounded pool of worker processes for slow rewards (sandboxed code, remote checks,
symbolic maths), with a deadline per call.

Processes, not threads: a Python call cannot be interrupted from another thread, and some
verifiers (math-verify) time themselves out with signal.alarm, which works only in a
process's main thread. A call past its deadline has its worker killed and replaced, and
scores as a failure, so one hung reward never blocks the loop for longer than timeout_s.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from pathlib import Path

from aha.rewards.functions import bind_args, resolve_function

_CTX = multiprocessing.get_context("spawn")  # never fork a process that holds a model and thread pools


@dataclass
class Outcome:
    value: object = None  # what the function returned
    error: str | None = None  # why it has no value (raised, timed out, worker died)


def _worker_main(conn, fn_path: str, args: dict, base_dir: str) -> None:

    try:
        fn = resolve_function(fn_path, base_dir=base_dir)
        if args:
            fn = bind_args(fn, args, key="reward.args")
    except Exception as err:  # noqa: BLE001 - the parent raises it
        conn.send(("failed", f"{type(err).__name__}: {err}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        index, completion, sample = job
        try:
            conn.send((index, Outcome(value=fn(completion, sample))))
        except Exception as err:  # noqa: BLE001 - reported to the parent, scored as failed there
            conn.send((index, Outcome(error=f"{type(err).__name__}: {err}")))


class _Worker:
    def __init__(self, spec: tuple):
        self.conn, child = _CTX.Pipe()
        self.process = _CTX.Process(target=_worker_main, args=(child, *spec), daemon=True)
        self.process.start()
        child.close()
        self.job: int | None = None  # the index it is working on
        self.deadline = float("inf")
        self.ready = False

    def wait_ready(self, timeout_s: float) -> None:
        """Block until the worker has imported its function; start-up (imports) does not
        count against a call's deadline."""
        if self.ready:
            return
        message = self.conn.recv() if self.conn.poll(timeout_s) else ("failed", f"no answer in {timeout_s:g} s")
        if message[0] != "ready":
            self.kill()
            raise RuntimeError(f"a reward worker could not start: {message[1]}")
        self.ready = True

    def kill(self) -> None:
        self.process.kill()
        self.process.join()
        self.conn.close()


class WorkerPool:
    """Runs fn(completion, sample) for many samples on at most `workers` processes.
    The function is named by its "module:function" path and resolved in each worker, so
    nothing needs to be pickled but strings and the samples."""

    STARTUP_S = 120.0

    def __init__(self, fn_path: str, args: dict, base_dir: str | Path, workers: int, timeout_s: float):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.spec = (fn_path, dict(args), str(base_dir))
        self.size, self.timeout_s = workers, timeout_s
        self.workers: list[_Worker] = []
        self.restarts = 0  # workers killed at a deadline or found dead

    def map(self, completions: list[str], samples: list[dict]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(completions)
        pending = list(range(len(completions)))[::-1]  # pop() takes them in order
        while len(self.workers) < min(self.size, len(completions)):
            self.workers.append(_Worker(self.spec))
        while pending or any(w.job is not None for w in self.workers):
            for worker in self.workers:
                if worker.job is None and pending:
                    worker.wait_ready(self.STARTUP_S)
                    worker.job = pending.pop()
                    worker.deadline = time.monotonic() + self.timeout_s
                    worker.conn.send((worker.job, completions[worker.job], samples[worker.job]))
            busy = [w for w in self.workers if w.job is not None]
            wait_s = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            ready = wait([w.conn for w in busy], timeout=wait_s)
            for worker in busy:
                if worker.conn in ready:
                    try:
                        index, outcome = worker.conn.recv()
                    except (EOFError, OSError):
                        worker.process.join(timeout=5)  # reap it, to report how it ended
                        code = worker.process.exitcode
                        self._replace(worker, outcomes, f"the worker died (exit code {code})")
                        continue
                    outcomes[index] = outcome
                    worker.job = None
                elif time.monotonic() >= worker.deadline:
                    self._replace(worker, outcomes, f"timed out after {self.timeout_s:g} s")
        return outcomes

    def _replace(self, worker: _Worker, outcomes: list, error: str) -> None:
        outcomes[worker.job] = Outcome(error=error)
        worker.kill()
        self.restarts += 1
        self.workers[self.workers.index(worker)] = _Worker(self.spec)

    def close(self) -> None:
        for worker in self.workers:
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in self.workers:
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()
        self.workers = []
