"""The candidate's side of the code sandbox, started by the harness inside bubblewrap as
`python -I -B /aha/runner.py IN_FD OUT_FD`. It reads its job from IN_FD, confines
itself, then either
  - "main": runs the program as __main__ on its real stdin/stdout (stdin/stdout tests), or
  - "serve": runs the program once, tells the harness its top-level names, then answers
    calls (function name, arguments as tagged JSON) with return values the same way.
It never sees a test or an expected value, so there is nothing here for a program to
patch, forge or read: whatever it sends back is plain data that the harness judges.

Confinement inside the namespaces bubblewrap made (standard library only):
  1. rlimits: CPU seconds, address space, file size, open files, no core dumps; one CPU
     core; /tmp with an inode limit (remounted when started as root; for an ordinary user,
     a fresh tmpfs mounted over it in a mount namespace of the runner's own);
  2. a fresh, empty session keyring, then (when started as root) every uid and gid set to
     the sandbox's own unprivileged id, which clears all capabilities, or (for an ordinary
     user) every capability bubblewrap left it dropped; at most 64 threads (RLIMIT_NPROC,
     counted per uid, or per user namespace for an ordinary user); no_new_privs;
  3. Landlock (Linux >= 5.13): writes only in /tmp (a size-limited tmpfs) and /dev/null,
     reads only the interpreter, /usr, /aha, /dev, /proc and `extra_read`; no TCP
     (ABI >= 4); signals and abstract UNIX sockets scoped (ABI >= 6);
  4. seccomp: no sockets, no new processes (threads allowed), no ptrace, io_uring, AIO,
     namespaces, keyrings, userfaultfd, perf events, bpf, inotify, SysV IPC, POSIX
     message queues, flock.
A layer the kernel lacks is reported; the harness refuses to go on unless told to.
"""

import ctypes
import json
import os
import platform
import re
import resource
import stat
import struct
import sys
import traceback
import types
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from codec import fits, from_data, to_data  # noqa: E402

MAX_THREADS = 64  # RLIMIT_NPROC: a uid of its own (started by root) or a user namespace of its own (an ordinary user)
FALLBACK_UID = 65534  # where the sandbox's own uid cannot be set (root of a container's user namespace)
MAX_INODES = 10_000  # files and folders in /tmp: each costs kernel memory that disk_mb does not count
MAX_GLOBAL = 64 << 10  # characters of one plain-data global offered to the tests
MS_NOSUID, MS_NODEV, MS_REMOUNT = 2, 4, 32
CLONE_NEWNS = 0x00020000
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522

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
EPERM, EAGAIN, ENOMEM, EACCES, ENOSYS = 1, 11, 12, 13, 38
MAP_SHARED_ANONYMOUS = 0x01 | 0x20  # MAP_SHARED (MAP_SHARED_VALIDATE has its bit too) | MAP_ANONYMOUS
CLONE_THREAD = 0x00010000
SYSCALLS = {  # arch -> (audit arch, {name: number})
    "x86_64": (0xC000003E, {
        "socket": 41, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "ptrace": 101, "add_key": 248,
        "request_key": 249, "keyctl": 250, "inotify_init": 253, "unshare": 272, "inotify_init1": 294,
        "perf_event_open": 298, "fanotify_init": 300, "setns": 308, "process_vm_readv": 310,
        "process_vm_writev": 311, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425, "clone3": 435,
        # SysV IPC and POSIX queues: kernel memory outside RLIMIT_AS
        "shmget": 29, "shmat": 30, "shmctl": 31, "semget": 64, "semop": 65, "semctl": 66, "shmdt": 67,
        "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "semtimedop": 220, "mq_open": 240,
        # the host-wide AIO context pool (aio-nr), and locks a host process could wait on
        "io_setup": 206, "io_destroy": 207, "io_getevents": 208, "io_submit": 209, "io_cancel": 210,
        "io_pgetevents": 333, "flock": 73,
        # extended attributes on tmpfs are kernel memory that neither disk_mb nor memory_mb counts;
        # the CPU the sandbox was pinned to stays its only one
        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "setxattrat": 463, "sched_setaffinity": 203,
        # memory files: shmem pages that outlive their mapping, outside RLIMIT_AS (mmap below)
        "memfd_create": 319, "memfd_secret": 447, "mmap": 9}),
    "aarch64": (0xC00000B7, {
        "socket": 198, "socketpair": 199, "clone": 220, "ptrace": 117, "add_key": 217, "request_key": 218,
        "keyctl": 219, "inotify_init1": 26, "unshare": 97, "perf_event_open": 241, "fanotify_init": 262,
        "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280, "userfaultfd": 282,
        "io_uring_setup": 425, "clone3": 435,
        "mq_open": 180, "msgget": 186, "msgctl": 187, "msgrcv": 188, "msgsnd": 189, "semget": 190, "semctl": 191,
        "semtimedop": 192, "semop": 193, "shmget": 194, "shmctl": 195, "shmat": 196, "shmdt": 197,
        "io_setup": 0, "io_destroy": 1, "io_submit": 2, "io_cancel": 3, "io_getevents": 4, "io_pgetevents": 292,
        "flock": 32, "setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "setxattrat": 463, "sched_setaffinity": 122,
        "memfd_create": 279, "memfd_secret": 447, "mmap": 222}),
}
KEYCTL_JOIN_SESSION_KEYRING = 1
PR_CAPBSET_DROP = 24

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


def limit_tmp(job: dict) -> str | None:
    """/tmp with an inode limit too (bubblewrap sets only its size). Started by root, the
    runner remounts bubblewrap's /tmp. An ordinary user's runner sits in a user namespace
    nested below the one that owns bubblewrap's mounts (--disable-userns makes it), so it
    cannot remount them; with the CAP_SYS_ADMIN bubblewrap left it in its own namespace it
    takes a mount namespace of its own and mounts a fresh, limited tmpfs over /tmp."""
    options = ctypes.c_char_p(f"size={int(job['disk_bytes'])},nr_inodes={MAX_INODES},mode=1777".encode())
    if os.geteuid() == 0:
        if libc.mount(b"tmpfs", b"/tmp", b"tmpfs", ctypes.c_ulong(MS_REMOUNT | MS_NOSUID | MS_NODEV), options) != 0:
            return f"/tmp inode limit: {os.strerror(ctypes.get_errno())}"
        return None
    if libc.unshare(ctypes.c_int(CLONE_NEWNS)) != 0 \
            or libc.mount(b"tmpfs", b"/tmp", b"tmpfs", ctypes.c_ulong(MS_NOSUID | MS_NODEV), options) != 0:
        return (f"/tmp inode limit: {os.strerror(ctypes.get_errno())} (an ordinary user's sandbox needs bubblewrap "
                f"to grant CAP_SYS_ADMIN in its user namespace, which a setuid bubblewrap does not)")
    os.chdir("/tmp")  # the working folder was the unlimited /tmp now beneath it
    return None


def pin_cpu(cpu: int) -> None:
    """One core for the whole sandbox (threads inherit it; seccomp then forbids changing it),
    so a program cannot take every core from the other reward workers."""
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[cpu % len(allowed)]})


def drop_capabilities() -> str | None:
    """An ordinary user's runner: every capability bubblewrap left it (CAP_SYS_ADMIN and
    CAP_SETPCAP, in its own user namespace, for /tmp), from every set, the bounding set first
    (which takes CAP_SETPCAP), so no exec can regain one."""
    for cap in range(64):
        _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: fine
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = ctypes.create_string_buffer(struct.pack("Ii", LINUX_CAPABILITY_VERSION_3, 0))
    sets = ctypes.create_string_buffer(24)  # effective, permitted, inheritable: two 32-bit words each, all zero
    if libc.capset(header, sets) != 0:
        return f"dropping capabilities: {os.strerror(ctypes.get_errno())}"
    return None


def limit_threads_per_namespace() -> str | None:
    """An ordinary user's sandbox has no uid of its own, but a user namespace of its own
    (bubblewrap's), and since Linux 5.14 RLIMIT_NPROC counts a uid's tasks in one user
    namespace (ucounts): the 64 are this sandbox's alone, however many processes the user
    runs elsewhere (the user's own limit still counts them all). Before 5.14 it counted the
    user's processes on the whole host: reported, not set, since it would starve the sandbox."""
    version = re.match(r"(\d+)\.(\d+)", platform.release())
    if version is None or (int(version[1]), int(version[2])) < (5, 14):
        return f"thread limit: Linux {platform.release()} counts RLIMIT_NPROC per user, not per sandbox (needs 5.14)"
    resource.setrlimit(resource.RLIMIT_NPROC, (MAX_THREADS, MAX_THREADS))
    return None


def capabilities_left() -> str | None:
    """Whatever path dropped them, no capability set may still hold one."""
    with open("/proc/self/status") as status:
        held = [line.split(":")[0] for line in status if line.startswith("Cap") and int(line.split()[1], 16)]
    return f"capabilities left: {', '.join(held)}" if held else None


def drop_privileges(uid: int) -> str | None:
    """A new empty session keyring (the one inherited from the host is no longer reachable),
    then (as root) `uid` as every uid and gid, which clears every capability. The uid is the
    sandbox's own (the harness picks it), so RLIMIT_NPROC bounds this sandbox's threads alone.
    An ordinary user's runner drops what bubblewrap left it and limits its threads per user
    namespace instead."""
    arch = SYSCALLS.get(platform.machine())
    if arch is not None and libc.syscall(ctypes.c_long(arch[1]["keyctl"]), ctypes.c_long(KEYCTL_JOIN_SESSION_KEYRING),
                                         None) < 0 and os.geteuid() == 0:
        return f"new session keyring: {os.strerror(ctypes.get_errno())}"
    if os.geteuid() != 0:
        failed = drop_capabilities() or limit_threads_per_namespace()
        if failed:
            return failed
    else:
        for cap in range(64):  # the bounding set too, so no exec can ever regain one
            _prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last capability: fine
        os.setgroups([])
        try:
            os.setresgid(uid, uid, uid)
        except OSError:  # not mapped in this user namespace: the shared fallback (threads then share a limit)
            uid = FALLBACK_UID
            os.setresgid(uid, uid, uid)
        resource.setrlimit(resource.RLIMIT_NPROC, (MAX_THREADS, MAX_THREADS))
        for fd in (0, 1, 2):  # its own stdin/stdout, so /dev/stdin and /dev/stdout open as usual;
            try:  # only the pipes and in-memory files the harness made, never a device or a host file
                mode = os.fstat(fd).st_mode
                memfd = stat.S_ISREG(mode) and os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
                if stat.S_ISFIFO(mode) or memfd:
                    os.fchown(fd, uid, uid)
            except OSError:
                pass
        os.setresuid(uid, uid, uid)
    if os.geteuid() == 0 or os.getuid() == 0:
        return "still root after dropping privileges"
    return capabilities_left()


READABLE = ("/usr", "/aha", "/dev", "/proc")


def landlock(extra_read: list[str]) -> str | None:
    """Restrict this process; returns None, or why Landlock is not available."""
    try:
        abi = _syscall(SYS_LANDLOCK_CREATE_RULESET, None, 0, LANDLOCK_CREATE_RULESET_VERSION)
    except OSError as err:
        return f"Landlock unavailable: {err.strerror}"
    fs = FS_BITS_BY_ABI[max(k for k in FS_BITS_BY_ABI if k <= abi)]
    net = NET_BIND_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_AND_SIGNAL if abi >= 6 else 0
    attr = struct.pack("QQQ", fs, net, scoped)
    attr_size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = _syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.c_char_p(attr[:attr_size]), attr_size, 0)
    roots = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)), *sys.path, *READABLE,
             *extra_read]
    try:
        rules = [(root, FS_READ) for root in sorted({os.path.realpath(r) for r in roots if r and os.path.isdir(r)})]
        rules += [("/tmp", fs), ("/dev/null", fs & FILE_RIGHTS)]
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


def _bpf(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


DENIED = {"socket": EACCES, "socketpair": EACCES, "fork": EAGAIN, "vfork": EAGAIN, "clone3": ENOSYS,
          "memfd_create": ENOMEM, "memfd_secret": ENOMEM}
ARGUMENTS = 16  # offset of args[0] in struct seccomp_data (nr, arch, instruction_pointer, args[6])


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
    for name, number in nr.items():
        if name not in ("clone", "mmap"):
            prog += [_bpf(jeq, 0, 1, number), _bpf(ret, 0, 0, errno(DENIED.get(name, EPERM)))]
    # mmap: a shared anonymous mapping is shmem; munmap all but a page of it and the address space
    # comes back but the pages stay, so RLIMIT_AS would bound nothing (flags: args[3], low word)
    prog += [_bpf(jeq, 0, 5, nr["mmap"]), _bpf(ld, 0, 0, ARGUMENTS + 3 * 8), _bpf(0x54, 0, 0, MAP_SHARED_ANONYMOUS),
             _bpf(jeq, 0, 1, MAP_SHARED_ANONYMOUS), _bpf(ret, 0, 0, errno(ENOMEM)), _bpf(ret, 0, 0, RET_ALLOW)]
    # clone: threads (CLONE_THREAD in the flags, args[0]) yes, processes no
    prog += [_bpf(jeq, 0, 4, nr["clone"]), _bpf(ld, 0, 0, ARGUMENTS), _bpf(jset, 0, 1, CLONE_THREAD),
             _bpf(ret, 0, 0, RET_ALLOW), _bpf(ret, 0, 0, errno(EAGAIN)), _bpf(ret, 0, 0, RET_ALLOW)]
    filt = ctypes.create_string_buffer(b"".join(prog))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(filt))
    if _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0) != 0:
        return f"seccomp unavailable: {os.strerror(ctypes.get_errno())}"
    return None


def confine(job: dict) -> list[str]:
    """Apply every layer; returns the ones that could not be applied."""
    set_limits(job)
    pin_cpu(int(job["cpu"]))
    tmp = limit_tmp(job)
    dropped = drop_privileges(int(job["uid"]))
    if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return [f"no_new_privs: {os.strerror(ctypes.get_errno())}"]
    return [m for m in (tmp, dropped, landlock(job.get("extra_read", [])), seccomp()) if m]


# ---- serving the harness

def _send(out, message: dict) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()


def _message(err: BaseException) -> str:
    try:
        return str(err)[:300]
    except BaseException:  # noqa: BLE001 - a message that cannot be printed is still an error
        return "(unprintable)"


def _failure(err: BaseException) -> str:
    return f"{type(err).__name__}: {_message(err)}"


def names_of(namespace: dict) -> dict:
    """What the tests may use: callables (as "callable") and small plain-data values (as
    tagged JSON; a large table stays the program's own, reachable through its functions)."""
    names = {}
    for name, value in list(namespace.items()):
        if name.startswith("__") or isinstance(value, types.ModuleType):
            continue
        if callable(value):
            names[name] = {"callable": True}
        else:
            if isinstance(value, Iterator) or not fits(value, MAX_GLOBAL // 4):  # used up / too large to offer
                continue
            try:
                data = to_data(value)
            except Exception:  # noqa: BLE001 - a value that is not plain data is simply not offered
                continue
            if len(json.dumps(data)) <= MAX_GLOBAL:
                names[name] = {"value": data}
    return names


def serve(job: dict, requests, out) -> None:
    namespace: dict = {"__name__": "solution"}
    try:  # two modules' worth of code in one namespace: each may start with `from __future__ import`
        exec(compile(job.get("setup", "") or "pass", "setup.py", "exec"), namespace)
        exec(compile(job["code"], "solution.py", "exec"), namespace)
    except BaseException as err:  # noqa: BLE001 - the harness reports it as the reason every test failed
        _send(out, {"ready": False, "error": _failure(err)})
        return
    _send(out, {"ready": True, "names": names_of(namespace)})
    for line in requests:
        call = json.loads(line)
        try:
            function = namespace[call["name"]]
            value = function(*from_data(call["args"]), **from_data(call["kwargs"]))
        except BaseException as err:  # noqa: BLE001 - the class and its bases: the harness picks one it knows
            reply = {"raised": [cls.__name__ for cls in type(err).__mro__], "message": _message(err)}
            try:  # its arguments as data where they are (KeyError('k').args[0] == 'k' on the other side too)
                reply["args"] = to_data(tuple(err.args)) if fits(err.args, 1000) else None
            except BaseException:  # noqa: BLE001
                pass
            _send(out, reply)
            continue
        try:
            reply = {"value": to_data(value)}
        except BaseException as err:  # noqa: BLE001 - not plain data: the harness fails the test
            reply = {"unsendable": _failure(err)}
        _send(out, reply)


def main() -> None:
    in_fd, out_fd = int(sys.argv[1]), int(sys.argv[2])
    requests, out = os.fdopen(in_fd, "r"), os.fdopen(out_fd, "w")
    job = json.loads(requests.readline())
    missing = confine(job)
    _send(out, {"confined": not missing, "missing": missing})
    if missing and not job["allow_weaker"]:
        sys.exit(3)
    if job["mode"] == "serve":
        serve(job, requests, out)
        return
    requests.close()
    out.close()
    sys.argv = ["solution.py"]
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(job.get("setup", "") or "pass", "setup.py", "exec"), namespace)
        exec(compile(job["code"], "solution.py", "exec"), namespace)
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - like `python solution.py`: a traceback and exit status 1
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main()
