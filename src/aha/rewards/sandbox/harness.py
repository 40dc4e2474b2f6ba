"""The judging side of the code sandbox: `python -I -B harness.py`, a job as JSON on
stdin, one JSON line per test result on stdout. Standard library only.

The candidate never shares an interpreter with the tests. It runs in its own process inside
bubblewrap (runner.py); this process holds the tests and the expected values and
talks to it over two pipes:
  - stdin/stdout tests: a fresh sandbox per test runs the program on the test's input;
    its output is compared here.
  - statement tests (`assert add(1, 2) == 3`, HumanEval's `check(candidate)`): the program
    runs once in a sandbox; its top-level functions appear here as proxies whose arguments
    and return values cross as tagged JSON (codec.py), and its plain-data globals as
    values. A test runs in this process on objects this process built.
Results go to the parent on a private copy of stdout; fd 1 itself then points at stderr, so
what a test prints cannot pass for a result.
Every wait on the candidate has a deadline kept here, so nothing the program does to its
own interpreter (signals, tracing, patched builtins) stops a timeout.
"""


import builtins
import copy
import ctypes
import json
import keyword
import os
import resource
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from codec import CodecError, from_data  # noqa: E402
from process import CandidateError, Sandbox, Tail, TestTimeout, stdin_file  # noqa: E402

START_GRACE_S = 3.0  # bubblewrap + interpreter start-up, on top of a test's own time
MAX_READY = 4 << 20  # bytes of the message listing the program's names (globals over 64 KiB are not sent)
HARNESS_MEMORY = 4 << 30  # soft address-space limit of this process, a backstop
BUILTIN_NAMES = frozenset(dir(builtins))


def check_confined(sandbox: Sandbox, job: dict, deadline: float) -> list:
    try:
        hello = sandbox.read_message(deadline)
    except CandidateError:
        raise SetupFailure(f"the sandbox did not start: {sandbox.log.text()[-1500:]}") from None
    if "confined" not in hello:
        raise CandidateError("the program spoke before the runner")
    missing = [str(m) for m in hello.get("missing", [])]
    if missing and not job["allow_weaker"]:
        raise SetupFailure("the code sandbox cannot confine programs on this machine: " + "; ".join(missing)
                           + " (Linux with Landlock and seccomp is required; allow_weaker=True runs unconfined)")
    return missing


class SetupFailure(Exception):
    """The sandbox itself could not be set up (not the candidate's fault)."""


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.strip().splitlines()]


def run_io_test(job: dict, test: dict, limit: float, report_missing, log: Tail) -> tuple[str | None, str]:
    """A fresh sandbox runs the program on the test's input: (None if its output matches, or
    why not; what it printed). A capture job (job["capture"], set only by the parent's
    run_program, never by test data) only records what the program printed (a tool call's
    result): it fails only when the program does."""
    stdin = stdin_file(str(test["input"]))
    stdout_r, stdout_w = os.pipe()
    try:
        sandbox = Sandbox(job, "main", stdin=stdin, stdout=stdout_w)
    finally:
        os.close(stdin)
        os.close(stdout_w)
    output = bytearray()
    try:
        report_missing(check_confined(sandbox, job, time.monotonic() + START_GRACE_S))
        deadline = time.monotonic() + limit
        readers = [stdout_r, sandbox.err_r]
        while readers:
            left = deadline - time.monotonic()
            if left <= 0:
                return f"timed out after {limit:g} s", output.decode("utf-8", "replace")
            ready, _, _ = select.select(readers, [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    readers.remove(fd)
                elif fd == stdout_r:
                    output += chunk
                    if len(output) > job["output_bytes"]:
                        return "output limit exceeded", output.decode("utf-8", "replace")
                else:
                    sandbox.log.add(chunk)
        try:
            code = sandbox.proc.wait(timeout=max(0.01, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return f"timed out after {limit:g} s", output.decode("utf-8", "replace")
        got = output.decode("utf-8", "replace")
        if code != 0:
            return f"the program exited with status {code}: {sandbox.log.text()[-300:]}", got
        if job.get("capture") or _lines(got) == _lines(str(test["output"])):
            return None, got
        return f"wrong output: {got[:200]!r}", got
    finally:
        os.close(stdout_r)
        log.add(sandbox.log.data)
        sandbox.kill()


class Program:
    """The candidate program served from one sandbox, restarted after a timeout or a crash."""

    def __init__(self, job: dict, report_missing):
        self.job, self.report_missing = job, report_missing
        self.sandbox: Sandbox | None = None
        self.functions: set[str] = set()
        self.values: dict = {}  # plain-data globals, decoded once per start
        self.deadline = 0.0
        self.failed: str | None = None  # the program itself raised before the tests: no restart helps
        # a timeout or a broken program during a test: the test fails even if its code caught
        # the exception (`try: f(x)` / `except: pass`, written to expect an error)
        self.broken: BaseException | None = None

    def start(self, limit: float) -> None:
        if self.failed is not None:
            raise CandidateError(self.failed)
        self.sandbox = Sandbox(self.job, "serve")
        self.report_missing(check_confined(self.sandbox, self.job, time.monotonic() + START_GRACE_S))
        ready = self.sandbox.read_message(time.monotonic() + limit, MAX_READY)
        if ready.get("ready") is not True or not isinstance(ready.get("names"), dict):
            self.failed = f"the program failed before the tests: {str(ready.get('error'))[:300]}"
            raise CandidateError(self.failed)
        self.functions, self.values = set(), {}
        for name, info in ready["names"].items():
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("__") \
                    or keyword.iskeyword(name) or not isinstance(info, dict):
                continue
            if info.get("callable") is True:
                self.functions.add(name)
            elif "value" in info:
                try:
                    self.values[name] = from_data(info["value"])
                except (CodecError, RecursionError):
                    continue

    def lookup(self, name: str):
        """The program's function (as a proxy) or plain value named `name`; KeyError if none."""
        if name in self.functions:
            return self.proxy(name)
        return copy.deepcopy(self.values[name])  # each test gets its own copy to mutate

    def namespace(self) -> dict:
        """The program's names as the tests see them. A name of a Python builtin is left out,
        so `def abs(x): return 0` cannot change what `abs(...)` means in a test."""
        return {name: self.lookup(name) for name in (*self.functions, *self.values) if name not in BUILTIN_NAMES}

    def proxy(self, name: str):
        def call(*args, **kwargs):
            if self.broken is not None:
                raise self.broken
            if self.sandbox is None:
                raise CandidateError("the program is not running")
            try:
                return self.sandbox.call(name, args, kwargs, self.deadline)
            except (TestTimeout, CandidateError) as err:
                self.broken = err
                raise

        call.__name__ = call.__qualname__ = name
        return call

    def stop(self) -> None:
        if self.sandbox is not None:
            self.sandbox.kill()
            self.sandbox = None


def _alarm(_signum, _frame):
    raise TestTimeout()


def run_statement(program: Program, job: dict, statement: str, index: int, limit: float) -> str | None:
    """Run one test statement here, on proxies of the program's functions. One interval timer
    covers all of it (start-up, decoding the program's values, the test's own code), so no
    step of the harness's own can outlast the test's time."""
    starting = program.sandbox is None
    signal.setitimer(signal.ITIMER_REAL, limit + (START_GRACE_S if starting else 0.0) + 0.05)
    try:
        if starting:
            program.start(limit)
        program.deadline = time.monotonic() + limit
        program.broken = None
        # the program's names first, then setup over them: what setup defines (imports, helpers
        # such as HumanEval's poly) is the task's, and the program cannot replace it. With an
        # entry point, only those names come from the program (a builtin's name included: the
        # task asked for it), after setup, whose stub of the entry point (HumanEval's prompt)
        # they replace.
        entry_points = job.get("entry_point") or []
        namespace = {"__name__": "__test__"} if entry_points else {**program.namespace(), "__name__": "__test__"}
        exec(compile(job.get("setup", "") or "pass", "setup.py", "exec"), namespace)
        for name in entry_points:
            try:
                namespace[name] = program.lookup(name)
            except KeyError:
                namespace.pop(name, None)  # never the task's own stub in place of the program's function
        exec(compile(statement, f"test_{index}", "exec"), namespace)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    if program.broken is not None:
        raise program.broken
    return None


def _describe(err: BaseException) -> str:
    """`Type: message`, whatever the message holds (str() of a 5,000-digit int raises)."""
    try:
        message = str(err)[:200]
    except BaseException:  # noqa: BLE001
        message = "(unprintable message)"
    return f"{type(err).__name__}: {message}"


def run_tests(job: dict, emit) -> None:
    missing_seen = []

    def report_missing(missing: list) -> None:
        if missing and not missing_seen:
            missing_seen.extend(missing)
            emit({"missing": missing})

    signal.signal(signal.SIGALRM, _alarm)
    limit = float(job["test_timeout_s"])
    program = Program(job, report_missing)
    log = Tail()
    try:
        for i, test in enumerate(job["tests"]):
            printed = None
            try:
                if isinstance(test, dict):
                    error, printed = run_io_test(job, test, limit, report_missing, log)
                else:
                    error = run_statement(program, job, str(test), i, limit)
            except SetupFailure:
                raise
            except (TestTimeout, CandidateError) as err:
                timed_out = isinstance(err, TestTimeout)
                error = f"timed out after {limit:g} s" if timed_out else _describe(err).split(": ", 1)[1]
                if program.sandbox is not None:
                    log.add(program.sandbox.log.data)
                program.stop()  # it may still be busy, or be gone: the next test gets a fresh one
            except BaseException as err:  # noqa: BLE001 - a failing test, whatever it raised
                error = _describe(err)
            record = {"test": i, "ok": error is None, "error": error}
            if job.get("capture"):  # a tool call: what the program printed
                record["output"] = printed or ""
            emit(record)
    finally:
        if program.sandbox is not None:
            log.add(program.sandbox.log.data)
        program.stop()
        emit({"log": log.text()})


def die_with_caller(caller_pid: int) -> None:
    """Be killed the moment the process that started us dies (a reward worker killed by its
    pool, Ctrl-C, the OOM killer): its own clean-up never runs then, and bubblewrap's
    --die-with-parent takes every sandbox started here along with us. Checking the parent
    after arming closes the race where the caller died before the prctl."""
    pr_set_pdeathsig = 1
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != caller_pid:
        os._exit(1)


def main() -> None:
    parent = os.getppid()
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (HARNESS_MEMORY, hard))  # soft only: a sandbox may ask for more
    job = json.loads(sys.stdin.read())
    die_with_caller(int(job.get("caller_pid", parent)))  # run_python passes its pid: no race at all
    # the report gets a channel of its own; anything a test or setup prints goes to stderr
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def emit(record: dict) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    try:
        run_tests(job, emit)
    except (SetupFailure, FileNotFoundError) as err:
        emit({"fatal": str(err)})


if __name__ == "__main__":
    main()
