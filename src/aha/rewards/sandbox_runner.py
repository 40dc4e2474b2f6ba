"""The child side of the code sandbox. Run as a script (`python -I -B sandbox_runner.py`), it
reads one job as JSON on stdin, confines its own process, then runs the candidate program
against the tests and reports each passed test on an inherited file descriptor.

It imports only the standard library and confines itself before any candidate code runs:
  1. resource limits: CPU seconds, address space, file size (bounds all output), open files;
  2. Landlock (Linux >= 5.13): the scratch folder is the only place it may write; it may
     read only the interpreter and its packages, the system folders (/usr, /lib, /etc,
     /dev, /proc, /sys) and the scratch folder, not the rest of the host (the task's data,
     its tests, home folders); TCP bind/connect are denied (ABI >= 4); signals and abstract
     UNIX sockets cannot reach outside the sandbox (ABI >= 6);
  3. when started as root, drop every capability and lock root out of regaining them
     (securebits), so uid 0 in the sandbox is an ordinary owner that Landlock confines;
  4. a seccomp filter: no sockets of any family, no new processes (fork, vfork, clone
     without CLONE_THREAD; clone3 reports ENOSYS so threads fall back to clone), no
     ptrace, io_uring, unshare or setns.
A layer the kernel lacks is reported back; the parent refuses to run unless told to
accept a weaker sandbox. Not a defence against kernel exploits: run untrusted code of
real adversaries in a VM.
"""

import ctypes
import io
import json
import os
import platform
import resource
import signal
import struct
import sys

# ---- Landlock (include/uapi/linux/landlock.h); syscall numbers are the same on all arches
SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION = 1
LANDLOCK_RULE_PATH_BENEATH = 1
FS_READ = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read file, read dir
FS_BITS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)  # rights a rule on a file may hold
NET_BIND_CONNECT_TCP = (1 << 0) | (1 << 1)
SCOPE_ABSTRACT_UNIX_AND_SIGNAL = (1 << 0) | (1 << 1)

# ---- seccomp (linux/seccomp.h, linux/filter.h)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
RET_ALLOW, RET_KILL_PROCESS = 0x7FFF0000, 0x80000000
EPERM, EAGAIN, EACCES, ENOSYS = 1, 11, 13, 38
CLONE_THREAD = 0x00010000
SYSCALLS = {  # arch -> (audit arch, {name: number})
    "x86_64": (0xC000003E, {"socket": 41, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "ptrace": 101,
                            "unshare": 272, "setns": 308, "io_uring_setup": 425, "clone3": 435}),
    "aarch64": (0xC00000B7, {"socket": 198, "socketpair": 199, "clone": 220, "ptrace": 117, "unshare": 97,
                             "setns": 268, "io_uring_setup": 425, "clone3": 435}),
}
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 28, 47, 4
SECBITS_LOCKED_NOROOT = 0x2F  # NOROOT, NO_SETUID_FIXUP and KEEP_CAPS off, all locked
LINUX_CAPABILITY_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)


def _c(args):
    return [ctypes.c_long(a) if isinstance(a, int) else a for a in args]


def _prctl(*args) -> int:
    return libc.prctl(*_c(args))


def _syscall(*args) -> int:
    result = libc.syscall(*_c(args))
    if result < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return result


def set_limits(job: dict) -> None:
    cpu = int(job["cpu_s"])
    limits = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),
        resource.RLIMIT_AS: (job["memory_bytes"],) * 2,
        resource.RLIMIT_FSIZE: (job["output_bytes"],) * 2,
        resource.RLIMIT_NOFILE: (64, 64),
        resource.RLIMIT_CORE: (0, 0),
    }
    for which, value in limits.items():
        resource.setrlimit(which, value)


SYSTEM_READ = ("/usr", "/lib", "/lib32", "/lib64", "/bin", "/sbin", "/etc", "/dev", "/proc", "/sys")


def readable_roots(extra: list[str]) -> list[str]:
    """The folders the candidate may read: the interpreter, its packages, the system."""
    roots = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), *sys.path, *SYSTEM_READ, *extra]
    return sorted({os.path.realpath(r) for r in roots if r and os.path.isdir(r)})


def landlock(scratch: str, extra_read: list[str]) -> str | None:
    """Restrict this process; returns None, or why Landlock is not available."""
    try:
        abi = _syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    except OSError as err:
        return f"Landlock unavailable: {err.strerror}"
    fs = FS_BITS_BY_ABI[max(k for k in FS_BITS_BY_ABI if k <= abi)]
    net = NET_BIND_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_AND_SIGNAL if abi >= 6 else 0
    handled = fs
    attr = struct.pack("QQQ", handled, net, scoped)
    attr_size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.c_char_p(attr[:attr_size]), attr_size, 0)
    try:
        rules = [(root, FS_READ) for root in readable_roots(extra_read)]
        rules += [(scratch, handled), ("/dev/null", handled & FILE_RIGHTS)]
        for path, rights in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = struct.pack("=Qi", rights, fd)
                _syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.c_char_p(rule), 0)
            finally:
                os.close(fd)
        _syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)
    return None


def drop_capabilities() -> str | None:
    """Root keeps its uid (the interpreter's files may sit under a private /root) but loses
    every capability, now and across execve."""
    if os.geteuid() != 0:
        return None
    if _prctl(PR_SET_SECUREBITS, SECBITS_LOCKED_NOROOT, 0, 0, 0) != 0:
        return f"securebits: {os.strerror(ctypes.get_errno())}"
    for cap in range(64):
        _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: fine
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("Ii", LINUX_CAPABILITY_VERSION_3, 0)
    data = bytes(24)  # two {effective, permitted, inheritable} words, all zero
    if libc.capset(ctypes.c_char_p(header), ctypes.c_char_p(data)) != 0:
        return f"capset: {os.strerror(ctypes.get_errno())}"
    return None


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def seccomp() -> str | None:
    arch = SYSCALLS.get(platform.machine())
    if arch is None:
        return f"seccomp filter has no syscall table for {platform.machine()}"
    audit_arch, nr = arch
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06

    def errno(e):
        return 0x00050000 | e

    prog = [_bpf(ld, 0, 0, 4), _bpf(jeq, 1, 0, audit_arch), _bpf(ret, 0, 0, RET_KILL_PROCESS), _bpf(ld, 0, 0, 0)]
    if platform.machine() == "x86_64":  # x32 syscalls share the arch value: refuse them all
        prog += [_bpf(jge, 0, 1, 0x40000000), _bpf(ret, 0, 0, errno(EPERM))]
    denied = {"socket": EACCES, "socketpair": EACCES, "fork": EAGAIN, "vfork": EAGAIN, "ptrace": EPERM,
              "unshare": EPERM, "setns": EPERM, "io_uring_setup": EPERM, "clone3": ENOSYS}
    for name, e in denied.items():
        if name in nr:
            prog += [_bpf(jeq, 0, 1, nr[name]), _bpf(ret, 0, 0, errno(e))]
    # clone: threads (CLONE_THREAD in the flags, args[0]) yes, processes no
    prog += [_bpf(jeq, 0, 4, nr["clone"]), _bpf(ld, 0, 0, 16), _bpf(jset, 0, 1, CLONE_THREAD),
             _bpf(ret, 0, 0, RET_ALLOW), _bpf(ret, 0, 0, errno(EAGAIN)), _bpf(ret, 0, 0, RET_ALLOW)]
    filt = ctypes.create_string_buffer(b"".join(prog))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(filt))
    if _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0) != 0:
        return f"seccomp unavailable: {os.strerror(ctypes.get_errno())}"
    return None


def confine(job: dict) -> list[str]:
    """Apply every layer; returns the ones that could not be applied."""
    set_limits(job)
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return [f"no_new_privs: {os.strerror(ctypes.get_errno())}"]
    return [m for m in (landlock(job["scratch"], job.get("extra_read", [])), drop_capabilities(), seccomp()) if m]


# ---- running the tests

class TestTimeout(BaseException):
    """A test ran past its time; BaseException so `except Exception` in the candidate cannot swallow it."""


class BoundedOutput(io.StringIO):
    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def write(self, text: str) -> int:
        if self.tell() + len(text) > self.limit:
            raise OSError("output limit exceeded")
        return super().write(text)


def _alarm(_signum, _frame):
    raise TestTimeout()


def _normalise(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return lines


def run_io_test(code: str, test: dict, output_limit: int) -> str | None:
    """Run the program as __main__ with the test's stdin; None if its stdout matches."""
    stdin, stdout = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = io.StringIO(str(test["input"])), BoundedOutput(output_limit)
    try:
        exec(compile(code, "solution.py", "exec"), {"__name__": "__main__"})
        got = sys.stdout.getvalue()
    finally:
        sys.stdin, sys.stdout = stdin, stdout
    if _normalise(got) != _normalise(str(test["output"])):
        return f"wrong output: {got[:200]!r}"
    return None


def run_tests(job: dict, report) -> None:
    code, tests, limit = job["code"], job["tests"], job["test_timeout_s"]
    signal.signal(signal.SIGALRM, _alarm)
    namespace: dict = {"__name__": "solution"}
    defined = None  # for assert-style tests the program runs once, then each test in its namespace
    for i, test in enumerate(tests):
        signal.setitimer(signal.ITIMER_REAL, limit)
        try:
            if isinstance(test, dict):
                error = run_io_test(code, test, job["output_bytes"])
            else:
                if defined is None:
                    defined = False
                    exec(compile(job.get("setup", "") + "\n" + code, "solution.py", "exec"), namespace)
                    defined = True
                if not defined:
                    raise RuntimeError("the program failed before the tests")
                exec(compile(test, f"test_{i}", "exec"), namespace)
                error = None
        except TestTimeout:
            error = f"timed out after {limit} s"
        except BaseException as err:  # noqa: BLE001 - any failure of the candidate fails the test
            error = f"{type(err).__name__}: {str(err)[:200]}"
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        report({"test": i, "ok": error is None, "error": error})


def main() -> None:
    job = json.loads(sys.stdin.read())
    nonce, fd = job.pop("nonce"), job.pop("report_fd")
    out = os.fdopen(fd, "w", buffering=1)

    def report(record: dict) -> None:
        out.write(json.dumps({"nonce": nonce, **record}) + "\n")

    os.chdir(job["scratch"])
    missing = confine(job)
    report({"confined": not missing, "missing": missing, "uid": os.getuid()})
    if missing and not job["allow_weaker"]:
        sys.exit(3)
    run_tests(job, report)


if __name__ == "__main__":
    main()
