"""The code sandbox, round two (issue 29): an ordinary user's sandbox is capped like root's
(at most 64 threads, /tmp at most 10,000 files), and code_tests runs when the interpreter
is reached through a symlinked virtualenv.

An ordinary user's sandbox is tested for real: the harness runs as that user (setpriv),
on the system's interpreter and a world-readable copy of the sandbox scripts, as
test_sandbox.py's test_an_ordinary_user_gets_the_same_sandbox does. Every bomb here is
bounded by the program itself (1,000 threads, 20,000 files), so it stays small on a
sandbox without the caps too.
"""

import json
import os
import platform
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from aha.rewards import code as code_module
from aha.rewards.code import sandbox_support

MISSING = sandbox_support()
SYSTEM_PYTHON = Path("/usr/bin/python3")
CAN_SWITCH_USER = os.geteuid() == 0 and shutil.which("setpriv") is not None and SYSTEM_PYTHON.exists()
# RLIMIT_NPROC counted per user namespace (so per sandbox) came with Linux 5.14
KERNEL = tuple(int(part) for part in platform.release().split("-")[0].split(".")[:2])
confined = pytest.mark.skipif(bool(MISSING) or not CAN_SWITCH_USER or KERNEL < (5, 14),
                              reason=f"needs a full sandbox {MISSING}, root, setpriv, /usr/bin/python3, Linux >= 5.14")
WHO = ["root", "ordinary user"]
ORDINARY_UID = pwd.getpwnam("nobody").pw_uid  # any uid but 0 will do: no account is needed
MAX_THREADS, MAX_INODES = 64, 10_000  # runner.py's caps


def as_user(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def run_harness(who: str, code: str, tests: list) -> list:
    """Run the harness as root or as an ordinary user; (ok, error) of each test. A fatal
    record (the sandbox did not start, a layer is missing) fails the test with its text."""
    with tempfile.TemporaryDirectory() as folder:  # directly under /tmp: pytest's tmp_path is private to root
        scripts = Path(folder)
        source = Path(code_module.__file__).parent / "sandbox"
        for name in ("harness.py", "process.py", "runner.py", "codec.py"):
            shutil.copy(source / name, scripts / name)
        for path in (scripts, *scripts.iterdir()):
            path.chmod(0o755)
        job = {"code": code, "tests": tests, "setup": "", "test_timeout_s": 8, "cpu_s": 8, "memory_bytes": 1 << 30,
               "output_bytes": 1 << 16, "disk_bytes": 64 << 20, "allow_weaker": False, "extra_read": []}
        prefix = as_user(ORDINARY_UID) if who == "ordinary user" else []
        done = subprocess.run([*prefix, str(SYSTEM_PYTHON), "-I", "-B", str(scripts / "harness.py")],
                              input=json.dumps(job), capture_output=True, text=True, timeout=60, cwd="/")
    records = [json.loads(line) for line in done.stdout.splitlines()]
    fatal = [r["fatal"] for r in records if "fatal" in r]
    assert not fatal and done.returncode == 0, (fatal, done.stderr[-2000:])
    return [(r["ok"], r["error"]) for r in records if "test" in r]


THREAD_BOMB = """
import threading, time
threading.stack_size(65536)  # small stacks: with 8 MiB ones the address-space limit stops it at ~20
started = 0
try:
    for _ in range(1000):
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()
        started += 1
except RuntimeError:
    pass
"""


@confined
@pytest.mark.parametrize("who", WHO)
def test_a_thread_bomb_stops_at_64_threads(who):
    """The cap is the sandbox's own: the user already runs 100 processes, yet the sandbox
    still gets (almost) all of its 64 threads (the main thread and, for an ordinary user,
    bubblewrap's init inside the sandbox count too)."""
    uid = ORDINARY_UID if who == "ordinary user" else 0
    crowd = [subprocess.Popen([*(as_user(uid) if uid else []), "sleep", "60"]) for _ in range(100)]
    try:
        results = run_harness(who, THREAD_BOMB, [f"assert {MAX_THREADS // 2} <= started < {MAX_THREADS}, started"])
    finally:
        for process in crowd:
            process.kill()
            process.wait()
    assert results == [(True, None)], results


FORK_BOMB = """
import os, threading, time
threading.stack_size(65536)  # small stacks: the address-space limit alone would allow thousands
lock = threading.Lock()
attempts, forks = 0, []

def bomb():
    global attempts
    for _ in range(2):  # each thread starts two more, until one of them fails
        with lock:
            if attempts >= 1000:
                return
            attempts += 1
        try:
            threading.Thread(target=bomb, daemon=True).start()
        except RuntimeError:
            return
    try:
        forks.append(os.fork())
    except OSError as err:
        forks.append(-err.errno)
    time.sleep(5)

threading.Thread(target=bomb, daemon=True).start()
time.sleep(2)
tasks = len(os.listdir("/proc/self/task"))
"""


@confined
@pytest.mark.parametrize("who", WHO)
def test_a_fork_bomb_is_contained(who):
    tests = [f"assert tasks <= {MAX_THREADS}, tasks", "assert forks and all(f < 0 for f in forks), forks[:5]"]
    assert run_harness(who, FORK_BOMB, tests) == [(True, None)] * 2


FILE_BOMB = """
import os
made, err = 0, None
os.close(os.open("/tmp/target", os.O_CREAT | os.O_WRONLY))
try:
    for i in range(20000):
        path = "/tmp/n%05d" % i
        if KIND == "files":
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY))
        elif KIND == "folders":
            os.mkdir(path)
        else:
            os.symlink("/tmp/target", path)
        made += 1
except OSError as error:
    err = error.errno
inodes = os.statvfs("/tmp").f_files
"""


@confined
@pytest.mark.parametrize("kind", ["files", "folders", "symlinks"])
@pytest.mark.parametrize("who", WHO)
def test_a_file_bomb_stops_at_the_tmp_inode_limit(who, kind):
    """/tmp holds at most 10,000 inodes (kernel memory the size limit does not count), for
    an ordinary user as for root: the 64 MiB /tmp would otherwise take ~600,000 files."""
    tests = [f"assert {MAX_INODES - 100} <= made < {MAX_INODES}, (made, err)", f"assert inodes == {MAX_INODES}, inodes",
             "assert err == 28, err"]  # ENOSPC
    assert run_harness(who, f"KIND = {kind!r}\n" + FILE_BOMB, tests) == [(True, None)] * 3


PROBE = """
import ctypes, os, resource
caps = {l.split(":")[0]: l.split()[1] for l in open("/proc/self/status") if l.startswith("Cap")}
nproc = resource.getrlimit(resource.RLIMIT_NPROC)
inodes = os.statvfs("/tmp").f_files
cwd = os.getcwd()
open("here", "w").write("x")  # the working folder is writable, and it is the capped /tmp
cwd_inodes = os.statvfs(".").f_files
unmounted = ctypes.CDLL(None, use_errno=True).umount2(b"/tmp", 2)  # MNT_DETACH: the /tmp beneath has no limit
"""


@confined
@pytest.mark.parametrize("who", WHO)
def test_the_sandbox_has_roots_limits_and_no_capability_left(who):
    """An ordinary user's runner briefly holds CAP_SYS_ADMIN in its own user namespace (to
    mount the capped /tmp); none of it may reach the program."""
    tests = ["assert set(caps.values()) == {'0' * 16}, caps",
             f"assert nproc == ({MAX_THREADS}, {MAX_THREADS}), nproc", f"assert inodes == {MAX_INODES}, inodes",
             f"assert cwd == '/tmp' and cwd_inodes == {MAX_INODES}, (cwd, cwd_inodes)", "assert unmounted == -1"]
    assert run_harness(who, PROBE, tests) == [(True, None)] * 5


SHARED_MEMORY = """
import ctypes, errno, mmap
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
def mapped(flags):  # PROT_READ | PROT_WRITE; MAP_FAILED is -1
    address = libc.mmap(None, 1 << 20, 3, flags, -1, 0)
    return address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
shared = mapped(0x21)  # MAP_SHARED | MAP_ANONYMOUS: shmem pages that outlive a munmap of their mapping
validate = mapped(0x23)  # MAP_SHARED_VALIDATE | MAP_ANONYMOUS
private = mapped(0x22)  # MAP_PRIVATE | MAP_ANONYMOUS: counted by RLIMIT_AS, still allowed
libc.memfd_create.argtypes = [ctypes.c_char_p, ctypes.c_uint]
memfd = libc.memfd_create(b"x", 0), ctypes.get_errno()
try:
    mmap.mmap(-1, 4096)
    python_shared = "mapped"
except OSError as err:
    python_shared = err.errno
python_private = len(mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE))
"""


@confined
@pytest.mark.parametrize("who", WHO)
def test_memory_outside_the_address_space_limit_is_refused(who):
    """A shared anonymous mapping or a memory file is shmem: unmapped but for a page, its address
    space is given back and its pages kept, so a program held gigabytes past memory_mb (a red
    team took 3 GiB with a 1 GiB limit). Both are refused; private memory works as before."""
    # 12: ENOMEM (the tests see the program's plain-data globals only, not its errno module)
    tests = ["assert shared == (False, 12), shared", "assert validate == (False, 12), validate",
             "assert private[0], private", "assert memfd == (-1, 12), memfd",
             "assert python_shared == 12, python_shared", "assert python_private == 4096"]
    assert run_harness(who, SHARED_MEMORY, tests) == [(True, None)] * 6


@pytest.mark.skipif(bool(MISSING), reason=f"no full sandbox on this machine: {MISSING}")
def test_code_tests_runs_through_a_symlinked_virtualenv(tmp_path):
    """`.venv -> /elsewhere/venv` (a shared or cached environment): the interpreter's path as
    the caller knows it does not exist inside the sandbox, only its real one does."""
    prefix = os.path.realpath(sys.prefix)
    executable = os.path.relpath(sys.executable, sys.prefix)
    if executable.startswith(".."):
        pytest.skip(f"the interpreter {sys.executable} is not under its prefix {sys.prefix}")
    (tmp_path / "venv").symlink_to(prefix, target_is_directory=True)
    script = ("from aha.rewards.code import code_tests\n"
              "sample = {'tests': ['assert add(1, 2) == 3', 'assert add(2, 2) == 4']}\n"
              "print(code_tests('def add(a, b):\\n    return a + b\\n', sample, wall_s=20.0, test_s=5.0))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(code_module.__file__).parents[2])}  # a non-editable install too
    done = subprocess.run([str(tmp_path / "venv" / executable), "-c", script], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "1.0", (done.stdout, done.stderr[-1500:])
