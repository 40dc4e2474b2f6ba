"""The judging side of the code sandbox: `python -I -B sandbox_harness.py`, a job as JSON on
stdin, one JSON line per test result on stdout. Standard library only.

The candidate never shares an interpreter with the tests. It runs in its own process inside
bubblewrap (sandbox_runner.py); this process holds the tests and the expected values and
talks to it over two pipes:
  - stdin/stdout tests: a fresh sandbox per test runs the program on the test's input;
    its output is compared here.
  - statement tests (`assert add(1, 2) == 3`, HumanEval's `check(candidate)`): the program
    runs once in a sandbox; its top-level functions appear here as proxies whose arguments
    and return values cross as literals (sandbox_codec), and its plain-data globals as
    values. A test runs in this process on objects this process built.
Every wait on the candidate has a deadline kept here, so nothing the program does to its
own interpreter (signals, tracing, patched builtins) stops a timeout.
"""

import builtins
import copy
import json
import keyword
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sandbox_codec import CodecError, decode, encode  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
START_GRACE_S = 3.0  # bubblewrap + interpreter start-up, on top of a test's own time
MAX_FRAME = 16 << 20  # bytes in one reply from the candidate
MAX_REPLY = 12 << 20  # characters of one returned value's literal
HARNESS_MEMORY = 4 << 30  # address space of this process: decoding is bounded by MAX_FRAME, this is a backstop
BUILTIN_NAMES = frozenset(dir(builtins))
LOG_TAIL = 4000
SANDBOX_UID_BASE = 1_500_000_000  # far above any real user's or subordinate id range
SAFE_EXCEPTIONS = {cls.__name__: cls for cls in (
    ValueError, TypeError, KeyError, IndexError, ZeroDivisionError, AttributeError, RuntimeError,
    NotImplementedError, OverflowError, ArithmeticError, LookupError, RecursionError, AssertionError,
    NameError, UnicodeError, FileNotFoundError, OSError, MemoryError)}


class TestTimeout(BaseException):
    """A test ran past its time; BaseException so a test's `except Exception` does not swallow it."""


class CandidateError(BaseException):
    """The candidate died, timed out its start, broke the protocol or sent something that is
    not plain data. BaseException, so a test's `except Exception` cannot take it for an
    exception the function raised on purpose."""


class RemoteError(Exception):
    """The candidate's function raised an exception of a type the tests do not know."""


def bind_args(paths: list[str]) -> list[str]:
    """Read-only binds of `paths` at the same place, their parents created world-readable
    (bubblewrap would copy the host's modes, e.g. a private /root)."""
    args, made = [], {"/", "/usr", "/tmp", "/aha", "/dev", "/proc"}
    for path in paths:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts)):
            parent = "/" + "/".join(parts[:i])
            if parent not in made:
                made.add(parent)
                args += ["--perms", "0755", "--dir", parent]
        args += ["--ro-bind", path, path]
    return args


def interpreter_roots(extra: list[str]) -> list[str]:
    """The interpreter's folders outside /usr (a venv, pyenv), and the configured extras."""
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                           os.path.dirname(os.path.realpath(sys.executable)), *extra) if p}
    roots = sorted(r for r in roots if os.path.isdir(r) and not (r + "/").startswith("/usr/"))
    return [r for r in roots if not any(r != o and r.startswith(o + "/") for o in roots)]


def bwrap_command(job: dict, in_fd: int, out_fd: int) -> list[str]:
    bwrap = shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")
    if bwrap is None:
        raise FileNotFoundError("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` (Debian/Ubuntu)")
    command = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session", "--tmpfs", "/"]
    if os.geteuid() != 0:  # an ordinary user needs a user namespace for the rest
        command += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--disable-userns"]
    command += ["--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib32", "lib64", "sbin"):
        target = os.path.realpath("/" + link)
        if os.path.islink("/" + link) and target.startswith("/usr/"):
            command += ["--symlink", target.lstrip("/"), "/" + link]
        elif os.path.isdir("/" + link):
            command += ["--ro-bind", "/" + link, "/" + link]
    # /tmp first, so a bind below it (an extra_read folder under /tmp) is not covered by it
    command += ["--perms", "1777", "--size", str(job["disk_bytes"]), "--tmpfs", "/tmp"]
    command += bind_args(interpreter_roots(job.get("extra_read", [])))
    command += ["--ro-bind", os.path.join(HERE, "sandbox_runner.py"), "/aha/sandbox_runner.py",
                "--ro-bind", os.path.join(HERE, "sandbox_codec.py"), "/aha/sandbox_codec.py",
                "--dev", "/dev", "--proc", "/proc",
                "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp",
                "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
                "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
                # one core per sandbox: numeric libraries must not start a thread per host CPU
                "--setenv", "OPENBLAS_NUM_THREADS", "1", "--setenv", "OMP_NUM_THREADS", "1",
                "--setenv", "MKL_NUM_THREADS", "1",
                sys.executable, "-I", "-B", "/aha/sandbox_runner.py", str(in_fd), str(out_fd)]
    return command


class Tail:
    """The last LOG_TAIL bytes written to a pipe, drained while we wait on other things; past
    `limit` bytes in all, the program has printed too much."""

    def __init__(self, limit: int | None = None):
        self.data, self.size, self.limit = b"", 0, limit

    def add(self, chunk: bytes) -> None:
        self.data = (self.data + chunk)[-LOG_TAIL:]
        self.size += len(chunk)
        if self.limit is not None and self.size > self.limit:
            raise CandidateError(f"output limit exceeded ({self.limit} bytes)")

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


class Sandbox:
    """One sandboxed runner process: a job line in, JSON lines out, stderr kept as a tail."""

    def __init__(self, job: dict, mode: str, stdin=subprocess.DEVNULL, stdout=None):
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        err_r, err_w = os.pipe()
        self.log = Tail()  # debug output: drained and its tail kept, never a failure
        try:
            self.proc = subprocess.Popen(bwrap_command(job, req_r, resp_w), stdin=stdin,
                                         stdout=stdout if stdout is not None else err_w, stderr=err_w,
                                         pass_fds=(req_r, resp_w), close_fds=True)
        finally:
            for fd in (req_r, resp_w, err_w):
                os.close(fd)
        self.err_r = err_r
        self.buffer = bytearray()
        runner_job = {key: job[key] for key in ("code", "setup", "cpu_s", "memory_bytes", "output_bytes",
                                                "disk_bytes", "extra_read", "allow_weaker")}
        # as root, each sandbox gets an unprivileged uid of its own (no user has it; no two live
        # sandboxes share it, since bubblewrap's pid is unique), so its thread limit is its own;
        # and one core, spread over the allowed ones by the same pid
        pid = self.proc.pid
        self._write(json.dumps({**runner_job, "mode": mode, "uid": SANDBOX_UID_BASE + pid, "cpu": pid}) + "\n")

    def _write(self, text: str) -> None:
        try:
            os.write(self.req_w, text.encode()) if len(text) < 65536 else self._write_all(text.encode())
        except (BrokenPipeError, OSError) as err:
            raise CandidateError(f"the program is gone ({err.strerror})") from None

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.req_w, view):]

    def read_message(self, deadline: float, extra: tuple = ()) -> dict:
        """The next JSON line from the runner, draining stderr meanwhile; TestTimeout past the
        deadline, CandidateError when the runner dies or sends something that is not a message."""
        scanned = 0
        while (end := self.buffer.find(b"\n", scanned)) < 0:
            scanned = len(self.buffer)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestTimeout()
            fds = [fd for fd in (self.resp_r, self.err_r, *extra) if fd is not None]
            ready, _, _ = select.select(fds, [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if fd == self.resp_r:
                    if not chunk:
                        raise CandidateError(self.death())
                    self.buffer += chunk
                    if len(self.buffer) > MAX_FRAME:
                        raise CandidateError(f"a reply longer than {MAX_FRAME} bytes")
                elif fd == self.err_r:
                    if chunk:
                        self.log.add(chunk)
                    else:
                        self.err_r = None
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            raise CandidateError("the program wrote something that is not a reply") from None
        if not isinstance(message, dict):
            raise CandidateError("the program wrote something that is not a reply")
        return message

    def death(self) -> str:
        try:
            code = self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "the program closed its reply channel"
        return f"the program exited with status {code}" if code >= 0 else f"the program was killed by signal {-code}"

    def call(self, name: str, args: tuple, kwargs: dict, deadline: float):
        try:
            request = {"name": name, "args": encode(args), "kwargs": encode(kwargs)}
        except CodecError as err:
            raise CandidateError(f"the test passed {name} an argument that is not plain data: {err}") from None
        self._write(json.dumps(request) + "\n")
        reply = self.read_message(deadline)
        if "value" in reply:
            try:
                return decode(reply["value"], MAX_REPLY)
            except CodecError as err:
                raise CandidateError(f"{name} returned something that is not plain data: {err}") from None
        if isinstance(reply.get("raised"), str):
            cls = SAFE_EXCEPTIONS.get(reply["raised"], RemoteError)
            raise cls(str(reply.get("message", ""))[:300])
        if "unsendable" in reply:
            raise CandidateError(f"{name} returned something that is not plain data: {str(reply['unsendable'])[:300]}")
        raise CandidateError(f"{name}: the program sent a malformed reply")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # bwrap's --die-with-parent takes the whole sandbox with it
        self.proc.wait()
        for fd in (self.req_w, self.resp_r, self.err_r):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.req_w = self.resp_r = self.err_r = None


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


def _stdin_file(text: str) -> int:
    """The test's input as an in-memory file (not a pipe): `os.fstat(0).st_size` is its size,
    as on a judge that redirects a file, and nothing here has to feed it while it runs."""
    fd = os.memfd_create("stdin", 0)
    data = text.encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_io_test(job: dict, test: dict, limit: float, report_missing) -> str | None:
    """A fresh sandbox runs the program on the test's input; None if its output matches."""
    stdin = _stdin_file(str(test["input"]))
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
                return f"timed out after {limit:g} s"
            ready, _, _ = select.select(readers, [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    readers.remove(fd)
                elif fd == stdout_r:
                    output += chunk
                    if len(output) > job["output_bytes"]:
                        return "output limit exceeded"
                else:
                    sandbox.log.add(chunk)
        try:
            code = sandbox.proc.wait(timeout=max(0.01, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return f"timed out after {limit:g} s"
        if code != 0:
            return f"the program exited with status {code}: {sandbox.log.text()[-300:]}"
        got = output.decode("utf-8", "replace")
        return None if _lines(got) == _lines(str(test["output"])) else f"wrong output: {got[:200]!r}"
    finally:
        os.close(stdout_r)
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
        ready = self.sandbox.read_message(time.monotonic() + limit)
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
            elif isinstance(info.get("value"), str):
                try:
                    self.values[name] = decode(info["value"])
                except CodecError:
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
    """Run one test statement here, on proxies of the program's functions."""
    if program.sandbox is None:
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
    signal.setitimer(signal.ITIMER_REAL, limit + 0.05)  # the test's own code (trusted) also has a deadline
    try:
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
            try:
                if isinstance(test, dict):
                    error = run_io_test(job, test, limit, report_missing)
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
            emit({"test": i, "ok": error is None, "error": error})
    finally:
        if program.sandbox is not None:
            log.add(program.sandbox.log.data)
        program.stop()
        emit({"log": log.text()})


def main() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (HARNESS_MEMORY, HARNESS_MEMORY))
    job = json.loads(sys.stdin.read())
    out = sys.stdout

    def emit(record: dict) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    try:
        run_tests(job, emit)
    except (SetupFailure, FileNotFoundError) as err:
        emit({"fatal": str(err)})


if __name__ == "__main__":
    main()
