"""One sandboxed program process, as the harness starts it: the bubblewrap command line,
the pipes, the job line in, JSON replies out with deadlines, stderr drained. Standard
library only; imported by harness.py, which runs it outside the sandbox.
"""

import json
import os
import select
import shutil
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from codec import CodecError, from_data, to_data  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_FRAME = 16 << 20  # bytes in one reply from the candidate, at most
# decoding holds the parsed JSON and the value at once, up to ~55x the reply for small tagged
# items: a reply is capped at memory_mb / 64, so the judge's memory for it stays near memory_mb
FRAME_PER_MEMORY = 64
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


def stdin_file(text: str) -> int:
    """The test's input as an in-memory file (not a pipe): `os.fstat(0).st_size` is its size,
    as on a judge that redirects a file, and nothing here has to feed it while it runs."""
    fd = os.memfd_create("stdin", 0)
    data = text.encode()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


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


def interpreter_path() -> str:
    """The interpreter at a path that exists inside the sandbox, where its folders are bound
    at their real places only: its folder resolved (a virtualenv reached through a symlink,
    `.venv -> /elsewhere/venv`, is not there under the caller's name), its own name kept (a
    venv's bin/python links to the base interpreter, and Python finds the venv by that name)."""
    return os.path.join(os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable))


def interpreter_roots(extra: list[str]) -> list[str]:
    """The interpreter's folders outside /usr (a venv, pyenv), and the configured extras."""
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
                                           os.path.dirname(interpreter_path()),
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
        # CAP_SYS_ADMIN in the runner's own user namespace, which is all a tmpfs with an inode
        # limit takes (a setuid bubblewrap refuses --cap-add: the runner then reports the limit
        # missing); the runner drops both before the program runs
        if not os.stat(bwrap).st_mode & stat.S_ISUID:
            command += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP"]
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
    command += ["--ro-bind", os.path.join(HERE, "runner.py"), "/aha/runner.py",
                "--ro-bind", os.path.join(HERE, "codec.py"), "/aha/codec.py",
                "--dev", "/dev", "--proc", "/proc",
                "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp",
                "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
                "--setenv", "TMPDIR", "/tmp", "--setenv", "LANG", "C.UTF-8",
                # one core per sandbox: numeric libraries must not start a thread per host CPU
                "--setenv", "OPENBLAS_NUM_THREADS", "1", "--setenv", "OMP_NUM_THREADS", "1",
                "--setenv", "MKL_NUM_THREADS", "1",
                interpreter_path(), "-I", "-B", "/aha/runner.py", str(in_fd), str(out_fd)]
    return command


class Tail:
    """The last LOG_TAIL bytes written to a pipe, drained while we wait on other things."""

    def __init__(self):
        self.data = b""

    def add(self, chunk: bytes) -> None:
        self.data = (self.data + chunk)[-LOG_TAIL:]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


class Sandbox:
    """One sandboxed runner process: a job line in, JSON lines out, stderr kept as a tail."""

    def __init__(self, job: dict, mode: str, stdin: int | None = None, stdout=None):
        req_r, self.req_w = os.pipe()
        self.resp_r, resp_w = os.pipe()
        err_r, err_w = os.pipe()
        self.log = Tail()  # debug output: drained and its tail kept, never a failure
        # never the host's /dev/null or any other file of ours: stdin is an in-memory file
        empty = stdin_file("") if stdin is None else None
        try:
            self.proc = subprocess.Popen(bwrap_command(job, req_r, resp_w), stdin=stdin if empty is None else empty,
                                         stdout=stdout if stdout is not None else err_w, stderr=err_w,
                                         pass_fds=(req_r, resp_w), close_fds=True)
        finally:
            for fd in (req_r, resp_w, err_w) + ((empty,) if empty is not None else ()):
                os.close(fd)
        self.err_r = err_r
        self.buffer = bytearray()
        self.reply_limit = min(MAX_FRAME, job["memory_bytes"] // FRAME_PER_MEMORY)
        runner_job = {key: job[key] for key in ("code", "setup", "cpu_s", "memory_bytes", "output_bytes",
                                                "disk_bytes", "extra_read", "allow_weaker")}
        # as root, each sandbox gets an unprivileged uid of its own (no user has it; no two live
        # sandboxes share it, since bubblewrap's pid is unique), so its thread limit is its own;
        # and one core, spread over the allowed ones by the same pid
        pid = self.proc.pid
        try:
            self._write(json.dumps({**runner_job, "mode": mode, "uid": SANDBOX_UID_BASE + pid, "cpu": pid}) + "\n")
        except CandidateError:
            pass  # bubblewrap died before the runner started: check_confined reports it as a setup failure

    def _write(self, text: str) -> None:
        try:
            os.write(self.req_w, text.encode()) if len(text) < 65536 else self._write_all(text.encode())
        except (BrokenPipeError, OSError) as err:
            raise CandidateError(f"the program is gone ({err.strerror})") from None

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.req_w, view):]

    def read_message(self, deadline: float, limit: int = MAX_FRAME) -> dict:
        """The next JSON line from the runner, draining stderr meanwhile; TestTimeout past the
        deadline, CandidateError when the runner dies or sends something that is not a message."""
        scanned = 0
        while (end := self.buffer.find(b"\n", scanned)) < 0:
            scanned = len(self.buffer)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TestTimeout()
            fds = [fd for fd in (self.resp_r, self.err_r) if fd is not None]
            ready, _, _ = select.select(fds, [], [], left)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if fd == self.resp_r:
                    if not chunk:
                        raise CandidateError(self.death())
                    self.buffer += chunk
                    if len(self.buffer) > limit:
                        raise CandidateError(f"a reply longer than {limit} bytes")
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
            request = {"name": name, "args": to_data(args), "kwargs": to_data(kwargs)}
        except CodecError as err:
            raise CandidateError(f"the test passed {name} an argument that is not plain data: {err}") from None
        self._write(json.dumps(request) + "\n")
        reply = self.read_message(deadline, self.reply_limit)
        if "value" in reply:
            try:
                return from_data(reply["value"])
            except (CodecError, RecursionError) as err:
                raise CandidateError(f"{name} returned something that is not plain data: {err}") from None
        if isinstance(reply.get("raised"), list):  # the class and its bases: the first one tests know
            known = [SAFE_EXCEPTIONS[n] for n in reply["raised"] if isinstance(n, str) and n in SAFE_EXCEPTIONS]
            args = (str(reply.get("message", ""))[:300],)
            if reply.get("args") is not None:
                try:
                    decoded = from_data(reply["args"])
                    args = decoded if type(decoded) is tuple else args
                except (CodecError, RecursionError):
                    pass
            raise (known[0] if known else RemoteError)(*args)
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
