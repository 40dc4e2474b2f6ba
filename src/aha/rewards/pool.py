"""A bounded pool of worker processes for slow rewards (sandboxed code, remote checks,
symbolic maths), with a deadline per call.

Processes, not threads: a Python call cannot be interrupted from another thread, and some
verifiers (math-verify) time themselves out with signal.alarm, which works only in a
process's main thread. A call past its deadline has its worker killed and replaced, and
scores as a failure, so one hung reward never blocks the loop for longer than timeout_s.
What the worker started goes with it: each worker leads its own process group and is the
child subreaper of its descendants (Linux), so the processes a reward started, double-forked
and detached ones too, stay under it, and kill_tree finds and kills them all.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import time
from multiprocessing.connection import wait
from pathlib import Path

from aha.rewards.calls import TOKENS, Outcome, takes_tokens
from aha.rewards.functions import bind_args, resolve_function

__all__ = ["Outcome", "WorkerPool", "adopt_orphans", "kill_tree"]

_CTX = multiprocessing.get_context("spawn")  # never fork a process that holds a model and thread pools
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def adopt_orphans() -> None:
    """Make this process the child subreaper of its descendants (Linux): one whose parent exits
    (a double fork, a detached daemon) becomes this process's child, not init's, so it stays
    in the tree kill_tree walks. Elsewhere nothing changes: the process group is still killed."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def descendants(root: int) -> set[int]:
    """Every process under root, from each process's parent in /proc/<pid>/stat (none where
    there is no /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # the name before ")" may hold spaces
        except OSError:  # it exited meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):  # gone already
        pass


def kill_tree(pid: int) -> None:
    """SIGKILL pid, every process under it and, where pid leads one, its process group. Each is
    stopped first and the tree walked again until no new process shows, so a fork loop cannot
    outrun the kill, and no process is orphaned (and lost to init) before it is found."""
    stopped = {pid}
    _signal(pid, signal.SIGSTOP)
    for _ in range(1000):  # each round stops a generation; a stopped process forks no more
        new = descendants(pid) - stopped
        if not new:
            break
        for child in new:
            _signal(child, signal.SIGSTOP)
        stopped |= new
    for process in stopped:
        _signal(process, signal.SIGKILL)
    try:
        if os.getpgid(pid) == pid:  # never the group pid merely belongs to: that may be the trainer's
            os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _worker_main(conn, fn_path: str, args: dict, base_dir: str) -> None:
    try:
        os.setpgid(0, 0)  # its own group: the terminal's Ctrl-C is the trainer's to handle, and the group dies with it
    except OSError:
        pass
    adopt_orphans()
    try:
        fn = resolve_function(fn_path, base_dir=base_dir)
        if args:
            fn = bind_args(fn, args, key="reward.args")
    except Exception as err:  # noqa: BLE001 - the parent raises it
        conn.send(("failed", f"{type(err).__name__}: {err}"))
        return
    given_tokens = takes_tokens(fn)
    conn.send(("ready", None))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        index, completion, sample, tokens = job
        kwargs = {TOKENS: tokens} if given_tokens and tokens is not None else {}
        try:
            conn.send((index, Outcome(value=fn(completion, sample, **kwargs))))
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
        """Kill the worker and every process it started."""
        if self.process.pid is not None and self.process.exitcode is None:  # a reaped pid may be another's now
            kill_tree(self.process.pid)
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

    def map(self, completions: list[str], samples: list[dict],
            completion_tokens: list[int] | None = None) -> list[Outcome]:
        """fn's outcome per completion; completion_tokens (one count per completion) are given to
        a function that takes them."""
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
                    tokens = None if completion_tokens is None else completion_tokens[worker.job]
                    worker.conn.send((worker.job, completions[worker.job], samples[worker.job], tokens))
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
        """Stop the workers: an idle one ends when told; one busy with a call (a map
        interrupted by Ctrl-C) or that does not end in 5 s is killed with what it started."""
        for worker in self.workers:
            if worker.job is not None:
                worker.kill()
                continue
            try:
                worker.conn.send(None)
            except OSError:
                pass
        for worker in self.workers:
            if worker.job is not None:
                continue
            worker.process.join(timeout=5)
            if worker.process.is_alive():
                worker.kill()
            else:
                worker.conn.close()
        self.workers = []
