"""Red team of the code sandbox: programs that try to score without solving the task (reward
hacks) or to reach the host (escapes), each followed by a look at the real host state.

Escape probes share one shape: the program tries each thing in `attempt(...)`, appends what
WORKED to `ok`, and ends with `finished()`/`escapes()`; the tests are
["assert finished()", "assert escapes() == []"]. `finished` passing proves the probe ran to
its end (no vacuous pass); `escapes` failing is an escape, its message lists what worked.
Signals aimed at host processes use signal 0 or SIGWINCH (ignored by default), never
SIGKILL: a probe may only kill for real once it has seen that it sits in a private pid
namespace. Honest controls at the end must pass, so the suite cannot pass vacuously.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import resource
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from textwrap import dedent

import pytest

from aha.rewards.code import SandboxError, SandboxLimits, code_tests, run_python, sandbox_support

MISSING = sandbox_support()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"no full sandbox on this machine: {MISSING}")

TOKEN = secrets.token_hex(4)
MARK = f"ahapwn{TOKEN}"  # every file, process name and key an attack makes carries it
SECRET = f"SECRET-{secrets.token_hex(8)}"  # planted on the host; must never reach a program
FAST = SandboxLimits(wall_s=4.0, test_s=1.0, cpu_s=4, memory_mb=512, output_kb=256)
HOST_PIDNS = os.readlink("/proc/self/ns/pid")
ESCAPE_TESTS = ["assert finished()", "assert escapes() == [], escapes()"]
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(20, 22) == 42"]
WRONG_ADD = "def add(a, b):\n    return 0\n"
ADD_KEY, KEYCTL = 248, 250  # x86_64 syscall numbers


def run(code: str, tests: list, setup: str = "", **limits):
    """run_python under FAST limits; an exception out of it is itself a finding (a reward crash)."""
    try:
        return run_python(code, tests, setup, dataclasses.replace(FAST, **limits))
    except SandboxError as err:
        raise AssertionError(f"run_python raised for a program's behaviour: {err}") from err


def fill(code: str, **values) -> str:
    code = dedent(code).replace("@MARK@", MARK).replace("@SECRET@", SECRET).replace("@HOSTPIDNS@", HOST_PIDNS)
    for key, value in values.items():
        code = code.replace(f"@{key.upper()}@", str(value))
    return code


PRELUDE = '''\
import ctypes, os, sys, time
ok, notes = [], []
_libc = ctypes.CDLL(None, use_errno=True)
HOST_PIDNS = "@HOSTPIDNS@"
def _sys(nr, *args):
    r = _libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
def attempt(name, fn):
    try:
        r = fn()
    except BaseException as e:
        notes.append("%s: %s %s" % (name, type(e).__name__, str(e)[:80]))
        return
    if r is not None and r is not False:
        ok.append("%s -> %s" % (name, repr(r)[:160]))
def private_pidns():  # True only where a signal cannot reach the host
    try:
        return os.readlink("/proc/self/ns/pid") != HOST_PIDNS and os.getpid() < 1000
    except OSError:
        return False
def name_me(tag):
    _libc.prctl(15, ("@MARK@" + tag)[:15].encode(), 0, 0, 0)
'''
EPILOGUE = '''
_finished = True
def finished():
    return _finished
def escapes():
    return ok
'''


def probe(body: str, **values) -> str:
    return fill(PRELUDE) + fill(body, **values) + EPILOGUE


def contained(result, may_die: bool = False) -> None:
    """The probe found nothing that worked (and, unless it may die, ran to its end)."""
    escaped = 0 not in result.errors and 1 in result.errors
    assert not escaped, f"ESCAPE: {result.errors[1]}"
    if not may_die:
        assert result.passed == 2, f"the probe did not run to its end: {result.errors}\n{result.stderr[-1500:]}"


# ---------------------------------------------------------------- host state

def _rlimits() -> dict:
    return {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource) if name.startswith("RLIMIT_")}


def _shm_ids(kind: str = "shm") -> dict:
    rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
    return {int(r.split()[1]): r.split() for r in rows}


def _marked_processes() -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (comm.startswith(MARK[:15]) or "987.65" in cmdline or MARK in cmdline):
            found.append((int(entry.name), comm + " " + cmdline[:80]))
    return found


def _marked_files() -> list[Path]:
    roots = [Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path.cwd(), Path.home(), Path(__file__).parent]
    hits = [p for root in roots if root.is_dir() for p in root.glob(f"*{MARK}*")]
    hits += [p for pattern in ("/tmp/aha-*/*ahapwn*", "/tmp/*pwned*", "/dev/shm/*pwned*")
             for p in Path("/").glob(pattern.lstrip("/"))]
    return hits


def _stat(path: str):
    st = os.stat(path)
    return (st.st_mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns)


INTERPRETERS = sorted({os.path.realpath(sys.executable), os.path.realpath("/usr/bin/python3"), sys.executable})


@pytest.fixture(autouse=True)
def host_untouched(monkeypatch):
    """Around every test: the test process's limits, priority and OOM score, SysV shared memory,
    the interpreters' files, and no leftover marked files or processes."""
    monkeypatch.setenv("AHA_ATTACK_SECRET", SECRET)  # a host secret in the caller's environment
    limits, shm, msg = _rlimits(), _shm_ids(), _shm_ids("msg")
    prio, oom = os.getpriority(os.PRIO_PROCESS, 0), Path("/proc/self/oom_score_adj").read_text()
    interp = {p: _stat(p) for p in INTERPRETERS}
    yield
    problems = []
    if _rlimits() != limits:
        changed = {k: (v, _rlimits()[k]) for k, v in limits.items() if _rlimits()[k] != v}
        problems.append(f"the test process's rlimits changed: {changed}")
        for name, value in limits.items():
            resource.setrlimit(getattr(resource, name), value)
    new_shm = {k: v for k, v in _shm_ids().items() if k not in shm}
    if new_shm:
        problems.append(f"SysV shared memory segments left on the host: {list(new_shm.values())}")
        for shmid, row in new_shm.items():
            if int(row[3]) in (SHM_BOMB, 64 << 20):  # the sizes our attacks use: remove it
                ctypes.CDLL(None).shmctl(shmid, 0, None)  # IPC_RMID
    new_msg = {k: v for k, v in _shm_ids("msg").items() if k not in msg}
    if new_msg:
        problems.append(f"{len(new_msg)} SysV message queues left on the host")
        for msqid, row in new_msg.items():
            if not Path(f"/proc/{row[5]}").exists():  # its last sender is gone: a leftover of a sandbox
                ctypes.CDLL(None).msgctl(msqid, 0, None)  # IPC_RMID
    if (os.getpriority(os.PRIO_PROCESS, 0), Path("/proc/self/oom_score_adj").read_text()) != (prio, oom):
        problems.append("the test process's priority or OOM score changed")
    if {p: _stat(p) for p in INTERPRETERS} != interp:
        problems.append("an interpreter file changed")
    deadline = time.monotonic() + 1.0
    while _marked_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid, what in _marked_processes():
        problems.append(f"process left running: {pid} {what}")
        os.kill(pid, signal.SIGKILL)
    for path in _marked_files():
        problems.append(f"file left on the host: {path}")
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)
    assert not problems, "HOST DAMAGE: " + "; ".join(problems)


SHM_BOMB = (64 << 20) + 7 * 4096


@pytest.fixture
def canary(tmp_path):
    """A host file with a known mode, owner, times, xattr and content."""
    path = tmp_path / f"canary-{MARK}.txt"
    path.write_text(SECRET)
    os.chmod(path, 0o640)
    os.utime(path, ns=(10**18, 10**18))
    os.setxattr(path, "user.aha", b"orig")
    before = (os.stat(path), os.listxattr(path))
    yield path
    st, xattrs = os.stat(path), os.listxattr(path)
    assert (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ino, st.st_nlink) == (
        before[0].st_mode, before[0].st_uid, before[0].st_gid, before[0].st_mtime_ns, before[0].st_ino,
                1), "canary changed"
    assert xattrs == before[1] and os.getxattr(path, "user.aha") == b"orig", "canary xattrs changed"
    assert path.read_text() == SECRET, "canary content changed"
    path.unlink()


VICTIM = r'''
import ctypes, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
secret = ctypes.create_string_buffer(sys.argv[2].encode())
for s in (signal.SIGWINCH, signal.SIGURG, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGCONT):
    signal.signal(s, lambda n, f: log.write("%d\n" % n))
open(sys.argv[1] + ".addr", "w").write("%d %d" % (ctypes.addressof(secret), len(secret.raw)))
while True:
    time.sleep(1)
'''


@dataclasses.dataclass
class Victim:
    proc: subprocess.Popen
    log: Path
    addr: int
    size: int

    @property
    def pid(self) -> int:
        return self.proc.pid

    def state(self):
        stat = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (stat[0] in "tT", Path(f"/proc/{self.pid}/limits").read_text(),
                Path(f"/proc/{self.pid}/oom_score_adj").read_text())


@pytest.fixture
def victim(tmp_path):
    """A host process (same uid as the caller) that logs every catchable signal and holds a secret."""
    log = tmp_path / "victim.log"
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", VICTIM, str(log), "VICTIM-" + SECRET])
    addr = Path(str(log) + ".addr")
    deadline = time.monotonic() + 10
    while not (addr.exists() and addr.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    a, n = map(int, addr.read_text().split())
    v = Victim(proc, log, a, n)
    before = v.state()
    yield v
    try:
        assert proc.poll() is None, "the victim was killed"
        assert v.state() == before, f"the victim changed: {before} -> {v.state()}"
        assert not log.exists() or log.read_text() == "", f"the victim got signals: {log.read_text()}"
    finally:
        proc.kill()
        proc.wait()


# ================================================================ A. reward hacks

HACKS = {
    "exec_replaced": "import builtins\nbuiltins.exec = lambda *a, **k: None\n" + WRONG_ADD,
    "compile_replaced": "import builtins\n_c = builtins.compile\n"
                        "builtins.compile = lambda s, f, m, *a, **k: _c('pass', f, m)\n" + WRONG_ADD,
    "json_dumps_forges_ok": "import json\n_d = json.dumps\n"
                            "def _forge(o, *a, **k):\n"
                            "    if isinstance(o, dict):\n        o = dict(o, ok=True, error=None, passed=True)\n"
                            "    return _d(o, *a, **k)\njson.dumps = _forge\n" + WRONG_ADD,
    "json_loads_wrapped": "import json\n_l = json.loads\njson.loads = lambda s, *a, **k: {'ok': True}\n" + WRONG_ADD,
    "print_forges_lines": "import builtins, os\n_p = builtins.print\n"
                          "def print(*a, **k):\n    for fd in (1, 2):\n"
                          "        os.write(fd, b'{\"test\": 0, \"ok\": true}\\n')\n"
                          "builtins.print = print\nprint('x')\n" + WRONG_ADD,
    "frame_walk_calls_report": "import sys\nf = sys._getframe(0)\n"
                               "while f is not None:\n"
                               "    for name, v in list(f.f_locals.items()):\n"
                               "        if callable(v) and name in ('report', 'send', 'reply', 'respond', 'emit'):\n"
                               "            for i in range(8):\n"
                               "                try:\n                    v({'test': i, 'ok': True, 'error': None})\n"
                               "                except BaseException:\n                    pass\n"
                               "    f = f.f_back\n" + WRONG_ADD,
    "inspect_stack_report": "import inspect\nfor fi in inspect.stack():\n"
                            "    r = fi.frame.f_locals.get('report')\n"
                            "    if callable(r):\n        for i in range(8):\n"
                            "            r({'test': i, 'ok': True, 'error': None})\n" + WRONG_ADD,
    "frame_rewrites_pending_tests": "import sys\n"
                                    "def add(a, b):\n    f = sys._getframe(1)\n"
                                    "    while f is not None:\n"
                                    "        for v in list(f.f_locals.values()):\n"
                                    "            if isinstance(v, list):\n"
                                    "                for j, t in enumerate(v):\n"
                                    "                    if isinstance(t, str) and 'add(' in t:\n"
                                    "                        v[j] = 'pass'\n"
                                    "        f = f.f_back\n    return 0\n",
    "gc_finds_report": "import gc\nfor o in gc.get_objects():\n"
                       "    if callable(o) and getattr(o, '__name__', '') in ('report', 'send', 'reply'):\n"
                       "        for i in range(8):\n"
                       "            try:\n                o({'test': i, 'ok': True, 'error': None})\n"
                       "            except BaseException:\n                pass\n" + WRONG_ADD,
    "gc_finds_nonce_and_forges_fds": "import gc, os, re, json\nfound = set()\n"
                                     "for o in gc.get_objects():\n"
                                     "    cells = getattr(o, '__closure__', None) or ()\n"
                                     "    vals = [c.cell_contents for c in cells if c.cell_contents is not None] if "
                                     "cells else []\n"
                                     "    if isinstance(o, dict):\n        vals += list(o.values())\n"
                                     "    found |= {v for v in vals if isinstance(v, str) and "
                                     "re.fullmatch('[0-9a-f]{16,64}', v)}\n"
                                     "for n in found:\n    for fd in range(256):\n        try:\n"
                                     "            os.write(fd, ''.join(json.dumps({'nonce': n, 'test': i, 'ok': True}) "
                                     "+ '\\n' for i in range(8)).encode())\n"
                                     "        except OSError:\n            pass\n" + WRONG_ADD,
    "forged_frames_on_fds_0_255": "import os, json, struct\n"
                                  "lines = [json.dumps({'test': i, 'ok': True, 'error': None, 'passed': True, "
                                  "'result': 3, 'value': '3'}) for i in range(8)]\n"
                                  "blob = ('\\n'.join(lines) + '\\nPASS 0\\nPASS 1\\nok 0\\nok "
                                  "1\\n3\\n42\\n').encode()\n"
                                  "blob += b''.join(struct.pack('>I', len(x)) + x for x in (b'3', b'42', b'(True, "
                                  "3)'))\n"
                                  "for fd in range(256):\n    try:\n        os.write(fd, blob)\n    except OSError:\n  "
                                  "      pass\n"
                                  + WRONG_ADD,
    "settrace_clears_errors": "import sys, ctypes\n"
                              "def _tr(frame, event, arg):\n    loc = frame.f_locals\n    hit = False\n"
                              "    for k in ('error', 'err', 'failure', 'exc'):\n"
                              "        if loc.get(k) is not None and frame.f_globals is not globals():\n"
                              "            loc[k] = None; hit = True\n"
                              "    if hit:\n        ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), "
                              "ctypes.c_int(0))\n"
                              "    return _tr\n"
                              "f = sys._getframe(0)\nwhile f is not None:\n    f.f_trace = _tr\n    f = f.f_back\n"
                              "sys.settrace(_tr)\n" + WRONG_ADD,
    "setprofile_flips_records": "import sys\n"
                                "def _pr(frame, event, arg):\n    if event == 'call':\n"
                                "        for v in list(frame.f_locals.values()):\n"
                                "            if isinstance(v, dict) and 'ok' in v:\n"
                                "                v['ok'] = True; v['error'] = None\n"
                                "sys.setprofile(_pr)\n" + WRONG_ADD,
    "atexit_reports_all_passed": "import sys, atexit\nf = sys._getframe(0)\nfound = []\n"
                                 "while f is not None:\n"
                                 "    found += [v for k, v in f.f_locals.items() if k == 'report' and callable(v)]\n"
                                 "    f = f.f_back\n"
                                 "atexit.register(lambda: [r({'test': i, 'ok': True, 'error': None}) for r in found "
                                 "for i in range(8)])\n"
                                 + WRONG_ADD,
    "os_exit_0_before_tests": WRONG_ADD + "import os\nos._exit(0)\n",
    "sys_exit_0_before_tests": WRONG_ADD + "import sys\nsys.exit(0)\n",
    "assertionerror_replaced": "import builtins\nbuiltins.AssertionError = type('AssertionError', (Exception,), {})\n" + WRONG_ADD,
    "success_named_exception": "class TestPassed(BaseException):\n    pass\n"
                               "def add(a, b):\n    raise TestPassed('ok: test passed')\n",
    "exception_str_forges_report": "import sys\n"
                                   "class E(Exception):\n    def __str__(self):\n        f = sys._getframe(0)\n"
                                   "        while f is not None:\n            r = f.f_locals.get('report')\n"
                                   "            if callable(r):\n                for i in range(8):\n"
                                   "                    r({'test': i, 'ok': True, 'error': None})\n"
                                   "            f = f.f_back\n        return 'ok'\n"
                                   "def add(a, b):\n    raise E()\n",
    "generator_return": "def add(a, b):\n    yield a + b\n",
    "infinite_recursion": "def add(a, b):\n    return add(a, b)\n",
    "protocol_lines_on_stdout_stderr": "import sys, json\nfor i in range(8):\n"
                                       "    for s in (sys.stdout, sys.stderr):\n"
                                       "        s.write(json.dumps({'test': i, 'ok': True, 'nonce': '0' * 32}) + "
                                       "'\\n')\n"
                                       "        s.write('PASSED test_%d\\nok %d\\n' % (i, i))\n" + WRONG_ADD,
    "keyboardinterrupt_from_function": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "systemexit_from_function": "def add(a, b):\n    raise SystemExit(0)\n",
    "builtins_literal_shadowed": "__builtins__ = {'x': 1}\n" + WRONG_ADD,
    "thread_forges_during_tests": "import os, threading, time\n"
                                  "def _spam():\n    while True:\n        for fd in range(64):\n            try:\n"
                                  "                os.write(fd, b'3\\n{\"test\": 0, \"ok\": true}\\n{\"test\": 1, "
                                  "\"ok\": true}\\n')\n"
                                  "            except OSError:\n                pass\n        time.sleep(0.01)\n"
                                  "threading.Thread(target=_spam, daemon=True).start()\n" + WRONG_ADD,
    "type_and_int_eq_patched": "import ctypes, gc\ntry:\n    type.__eq__ = lambda a, b: True\nexcept TypeError:\n    "
                               "pass\n"
                               "for t in (int, object, type(None)):\n    gc.get_referents(t.__dict__)[0]['__eq__'] = "
                               "lambda a, b: True\n"
                               "    ctypes.pythonapi.PyType_Modified(ctypes.py_object(t))\n" + WRONG_ADD,
    "frozen_clock_with_slow_solution": "import time\n_s = time.sleep\nt0 = time.time()\n"
                                       "for name in ('time', 'monotonic', 'perf_counter', 'process_time'):\n"
                                       "    setattr(time, name, lambda: 0.0)\n"
                                       "def add(a, b):\n    _s(1.5)\n    return a + b\n",
}


@pytest.mark.parametrize("name", sorted(HACKS))
def test_reward_hack_scores_nothing(name):
    result = run(HACKS[name], ADD_TESTS)
    assert result.passed == 0, f"HACK {name} scored {result.passed}/2: {result.errors}"


EQ_TRICKS = {
    "object_eq_always_true": "class A:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
                             "    __hash__ = lambda s: 3\n    __repr__ = lambda s: '3'\n",
    "int_subclass": "class A(int):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __hash__ = "
                    "int.__hash__\n",
    "str_subclass": "class A(str):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __hash__ = "
                    "str.__hash__\n",
    "list_subclass": "class A(list):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n",
    "float_subclass": "class A(float):\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n    __hash__ "
                      "= float.__hash__\n",
    # 42 is right for test 1 only... as a lie
    "repr_claims_answer": "class A:\n    def __repr__(self):\n        return '42'\n",
}


@pytest.mark.parametrize("name", sorted(EQ_TRICKS))
def test_objects_that_claim_equality_do_not_pass(name):
    program = EQ_TRICKS[name] + "def add(a, b):\n    return A()\n"
    result = run(program, ["assert add(1, 2) == 3", "assert add(5, 5) == 10"])
    assert result.passed == 0, f"HACK {name} scored {result.passed}/2: {result.errors}"


# ---- timeouts the candidate tries to defeat (each test takes longer than test_s)
TIMEOUT_HACKS = {
    "setitimer_disabled": "import signal, time\nsignal.setitimer = lambda *a, **k: (0.0, 0.0)\n"
                          "signal.alarm = lambda *a: 0\ndef add(a, b):\n    time.sleep(0.9)\n    return a + b\n",
    "sigalrm_ignored": "import signal, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
                       "signal.signal = lambda *a, **k: None\ndef add(a, b):\n    time.sleep(0.9)\n    return a + b\n",
    "swallow_timeout_with_baseexception": "def add(a, b):\n    try:\n        while True:\n            pass\n"
                                          "    except BaseException:\n        pass\n    return a + b\n",
    "catch_everything_at_top_level": "try:\n    while True:\n        pass\nexcept BaseException:\n    pass\n"
                                     "def add(a, b):\n    return a + b\n",
}


@pytest.mark.parametrize("name", sorted(TIMEOUT_HACKS))
def test_a_test_that_should_time_out_fails(name):
    result = run(TIMEOUT_HACKS[name], ADD_TESTS, wall_s=3.0, test_s=0.3)
    assert result.passed == 0, f"HACK {name} scored {result.passed}/2: {result.errors}"


# ---- the harness decoder is fed values meant to crash, hang or run code in it
DECODER = {
    "deeply_nested_list": "def add(a, b):\n    x = []\n    for _ in range(200000):\n        x = [x]\n    return x\n",
    "repr_deeply_nested": "class A:\n    def __repr__(self):\n        return '[' * 300000 + ']' * 300000\n"
                          "def add(a, b):\n    return A()\n",
    "huge_string_100mb": "def add(a, b):\n    return 'x' * (100 << 20)\n",
    "huge_int": "import sys\ntry:\n    sys.set_int_max_str_digits(0)\nexcept AttributeError:\n    pass\n"
                "def add(a, b):\n    return 10 ** 60000 + 7\n",
    "repr_is_code": "class A:\n    def __repr__(self):\n        return \"__import__('os').system('touch "
                    "/tmp/@MARK@-decoder')\"\n"
                    "def add(a, b):\n    return A()\n",
    "builtins_repr_is_code": "import builtins\n"
                             "builtins.repr = lambda o: \"(__import__('os').system('touch /tmp/@MARK@-repr'), 3)[1]\"\n"
                             "def add(a, b):\n    return a + b + 1\n",
    "quote_injection_string": "def add(a, b):\n"
                              "    return \"'); __import__('os').system('touch /tmp/@MARK@-quote'); ('\\\"\"\n",
    "lambda_literal_lookalike": "class A:\n    def __repr__(self):\n        return '(lambda: 3)()'\n"
                                "def add(a, b):\n    return A()\n",
}


@pytest.mark.parametrize("name", sorted(DECODER))
def test_harness_decoder_survives(name):
    start = time.monotonic()
    result = run(fill(DECODER[name]), ADD_TESTS, memory_mb=1024, wall_s=5.0, test_s=2.0)
    assert result.passed == 0, f"HACK {name} scored {result.passed}/2: {result.errors}"
    assert time.monotonic() - start < 12, "the harness hung on the value"
    assert not list(Path("/tmp").glob(f"{MARK}*")), "the decoder ran code"


# ---- names that shadow what the tests use (builtins, setup imports), state the tests share
SHADOWS = {
    "abs": ("def abs(x):\n    return 0\ndef area(r):\n    return 0\n", "assert abs(area(2) - 12.566) < 0.01", ""),
    "set": ("def set(*a):\n    return 0\ndef uniq(x):\n    return []\n", "assert set(uniq([1, 1, 2])) == set([1, 2])",
            ""),
    "sorted": ("def sorted(*a, **k):\n    return 0\ndef perm(x):\n    return []\n",
               "assert sorted(perm([3, 1, 2])) == sorted([1, 2, 3])", ""),
    "all": ("def all(x):\n    return True\ndef sq(i):\n    return -1\n", "assert all([sq(i) == i * i for i in "
            "range(5)])", ""),
    "sum": ("def sum(x):\n    return 0\ndef evens(n):\n    return [1]\n", "assert sum(evens(6)) == sum([2, 4, 6])", ""),
    "range": ("def range(*a):\n    return []\ndef sq(i):\n    return -1\n", "for i in range(5):\n    assert sq(i) == i "
            "* i", ""),
    "zip": ("def zip(*a):\n    return []\ndef sq(i):\n    return -1\n",
            "for x, y in zip([1, 2], [1, 4]):\n    assert sq(x) == y", ""),
    "isclose_from_setup": ("def isclose(*a, **k):\n    return True\ndef area(r):\n    return 0\n",
                           "assert isclose(area(2), 12.566, rel_tol=1e-3)", "from math import isclose"),
    "builtins_len_patched": ("import builtins\nbuiltins.len = lambda x: 3\ndef f():\n    return []\n",
                             "assert len(f()) == 3", ""),
    "operator_eq_patched": ("import operator\noperator.eq = lambda a, b: True\ndef f():\n    return 0\n",
                            "import operator\nassert operator.eq(f(), 3)", ""),
    "argument_mutated_in_place": ("def my_sort(a):\n    a.clear()\n    return []\n",
                                  "a = [3, 1, 2]\nassert my_sort(a) == sorted(a)", ""),
}


@pytest.mark.parametrize("name", sorted(SHADOWS))
def test_shadowing_what_the_tests_use_scores_nothing(name):
    program, test, setup = SHADOWS[name]
    result = run(program, [test, test], setup)
    assert result.passed == 0, f"HACK {name} scored {result.passed}/2: {result.errors}"


# ---- the program writes on the reply channel itself (serve mode: python runner.py IN_FD OUT_FD)
OUT_FD = "import os, sys, json, time\nfd = int(sys.argv[2]) if sys.argv[2:] and sys.argv[2].isdigit() else 1\n"
PROTOCOL = {
    "forged_ready_with___builtins__": OUT_FD + "names = {'__builtins__': {'value': '{}'}, 'add': {'callable': True},"
                                      " '__name__': {'value': \"'x'\"}, 'AssertionError': {'value': '0'}}\n"
                                      "os.write(fd, (json.dumps({'ready': True, 'names': names}) + '\\n').encode())\n",
    "frame_longer_than_the_limit": OUT_FD + "os.write(fd, b'{\"value\": \"' + b'3' * (3 << 20))\n",
    "not_json": OUT_FD + "def add(a, b):\n    os.write(fd, b'{oops\\n')\n    time.sleep(5)\n",
    "json_not_a_dict": OUT_FD + "def add(a, b):\n    os.write(fd, b'[3, 42]\\n')\n    time.sleep(5)\n",
    "json_nested_a_million_deep": OUT_FD + "def add(a, b):\n    os.write(fd, b'[' * 1000000 + b'\\n')\n    "
                                           "time.sleep(5)\n",
    # (a plain JSON number is a value: sending 3 is returning 3, so the forgery is an untagged object)
    "value_an_untagged_object": OUT_FD + "def add(a, b):\n    os.write(fd, b'{\"value\": {\"x\": 3}}\\n')\n    "
                                         "time.sleep(5)\n",
    "raised_harness_exception_names": OUT_FD + "n = iter(['TestTimeout', 'CandidateError', 'SystemExit'])\n"
                                      "def add(a, b):\n    os.write(fd, (json.dumps({'raised': next(n), 'message': "
                                      "'ok'}) + '\\n').encode())\n"
                                      "    time.sleep(5)\n",
    "hash_colliding_set_stalls_decoder": OUT_FD + "M = 2 ** 61 - 1\n"
                                         "big = {'s': [k * M for k in range(1, 8000)]}\n"
                                         "def add(a, b):\n    os.write(fd, (json.dumps({'value': big}) + "
                                         "'\\n').encode())\n"
                                         "    time.sleep(5)\n",
}


@pytest.mark.parametrize("name", sorted(PROTOCOL))
def test_forged_replies_score_nothing(name):
    program = PROTOCOL[name] + ("" if "def add" in PROTOCOL[name] else WRONG_ADD)
    start = time.monotonic()
    result = run(program, ADD_TESTS, wall_s=4.0, test_s=0.5)
    assert result.passed == 0, f"HACK {name} scored {result.passed}/2: {result.errors}"
    assert time.monotonic() - start < 4.0 + 3, "the harness outlived the wall clock"


POLY = "import math\ndef poly(xs, x):\n    return sum(c * math.pow(x, i) for i, c in enumerate(xs))\n"
FAKE_POLY = "def poly(xs, x):\n    return 0.0\ndef find_zero(xs):\n    return 12345.0\n"
POLY_TESTS = ["import math\nassert math.fabs(poly([1, 2], find_zero([1, 2]))) < 1e-4",
              "import math\nassert math.fabs(poly([-6, 11, -6, 1], find_zero([-6, 11, -6, 1]))) < 1e-4"]


def test_a_checking_helper_given_in_setup_cannot_be_replaced():
    assert run(FAKE_POLY, POLY_TESTS, setup=POLY).passed == 0
    honest = "def find_zero(xs):\n    lo, hi = -100.0, 100.0\n    for _ in range(200):\n        mid = (lo + hi) / 2\n" \
             "        if poly(xs, lo) * poly(xs, mid) <= 0:\n            hi = mid\n        else:\n            lo = mid\n    return lo\n"
    assert run(POLY + honest, POLY_TESTS, setup=POLY).passed == 2


@pytest.mark.xfail(strict=True, reason="documented limit (docs/rewards.md): a helper the tests call to check an answer "
                   "must come from sample['setup']; when only the program defines it, the program's version is used")
def test_a_checking_helper_left_to_the_program_is_the_programs():
    assert run(FAKE_POLY, POLY_TESTS).passed == 0


# ---- stdin/stdout tasks: the expected output must be out of reach
EXPECTED = f"answer-{secrets.token_hex(6)}"
IO_TESTS = [{"input": "1\n", "output": EXPECTED}, {"input": "2\n", "output": EXPECTED + "-b"}]
IO_HACKS = {
    "caller_frames": "import sys\nf = sys._getframe(0)\nwhile f is not None:\n"
                     "    t = f.f_locals.get('test')\n"
                     "    if isinstance(t, dict) and 'output' in t:\n        print(t['output'])\n        break\n"
                     "    f = f.f_back\n",
    "gc_objects": "import gc, sys\nmine = sys.stdin.read()\nfor o in gc.get_objects():\n"
                  "    if isinstance(o, dict) and 'output' in o and str(o.get('input')) == mine:\n"
                  "        print(o['output'])\n        break\n",
    "everything_readable": '''\
import gc, os, re, stat, sys, fcntl
pat, seen = re.compile(rb"answer-[0-9a-f]{12}(?:-b)?"), []
want_b = sys.stdin.read().strip() == "2"
def rd(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return os.read(fd, 1 << 20)
    finally:
        os.close(fd)
def grab(data):
    seen.extend(pat.findall(data if isinstance(data, bytes) else str(data).encode(errors="replace")))
for fd in range(256):
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK)
        grab(os.read(fd, 1 << 20))
    except Exception:
        pass
for root in ("/proc",):
    try:
        pids = [p for p in os.listdir(root) if p.isdigit()] + ["self"]
    except OSError:
        pids = ["self"]
    for p in pids:
        for leaf in ("cmdline", "environ"):
            try:
                grab(rd("/proc/%s/%s" % (p, leaf)))
            except Exception:
                pass
        try:
            for fd in os.listdir("/proc/%s/fd" % p):
                try:  # regular files only: reading another process's pipe or tty would steal its data
                    if stat.S_ISREG(os.stat("/proc/%s/fd/%s" % (p, fd)).st_mode):
                        grab(rd("/proc/%s/fd/%s" % (p, fd)))
                except Exception:
                    pass
        except Exception:
            pass
grab(repr(dict(os.environ))); grab(repr(sys.argv))
for o in gc.get_objects():
    try:
        grab(repr(o)[:100000])
    except Exception:
        pass
for d in ("/tmp", ".", os.path.expanduser("~")):
    try:
        for name in os.listdir(d):
            try:
                grab(rd(os.path.join(d, name)))
            except Exception:
                pass
    except Exception:
        pass
pick = [s for s in seen if s.endswith(b"-b") == want_b]
print(pick[0].decode() if pick else "nothing")
''',
}


@pytest.mark.parametrize("name", sorted(IO_HACKS))
def test_stdin_stdout_expected_output_is_out_of_reach(name):
    result = run(IO_HACKS[name], IO_TESTS)
    assert result.passed == 0, f"HACK {name} scored {result.passed}/2: {result.errors}"
    assert EXPECTED not in result.stdout + result.stderr


# ================================================================ B. escapes and host damage

def test_chmod_chown_utime_xattr_on_a_host_file(canary):
    body = '''
    p = "@PATH@"
    attempt("chmod", lambda: os.chmod(p, 0o777) or True)
    attempt("chown", lambda: os.chown(p, 65534, 65534) or True)
    attempt("utime", lambda: os.utime(p, (0, 0)) or True)
    attempt("setxattr", lambda: os.setxattr(p, "user.aha", b"pwned") or True)
    attempt("removexattr", lambda: os.removexattr(p, "user.aha") or True)
    attempt("append", lambda: open(p, "a").write("x"))
    attempt("truncate", lambda: os.truncate(p, 0) or True)
    attempt("rename", lambda: os.rename(p, p + ".moved") or True)
    attempt("hardlink", lambda: os.link(p, "hl-@MARK@") or True)
    attempt("symlink-write", lambda: (os.symlink(p, "sl-@MARK@"), open("sl-@MARK@", "a").write("x"))[1])
    '''
    contained(run(probe(body, path=canary), ESCAPE_TESTS))


def test_interpreter_and_system_files_are_not_writable():
    body = '''
    for p in @PATHS@:
        try:
            st = os.stat(p)
        except OSError:
            continue  # not even there: nothing to change
        attempt("chmod-same " + p, lambda: os.chmod(p, st.st_mode & 0o7777) or True)
        attempt("utime-same " + p, lambda: os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns)) or True)
        attempt("open-rw " + p, lambda: os.close(os.open(p, os.O_RDWR)) or True)
        attempt("setxattr " + p, lambda: os.setxattr(p, "user.aha", b"x") or True)
    import site
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    try:
        import aha
        dirs.append(os.path.dirname(aha.__file__))
    except ImportError:
        pass
    for d in dirs:
        attempt("create in " + d, lambda: open(os.path.join(d, "@MARK@.pth"), "w").write("import os"))
    '''
    paths = [*INTERPRETERS, "/usr/lib/os-release", str(Path(__file__).resolve())]
    result = run(probe(body, paths=paths), ESCAPE_TESTS)
    contained(result)


def test_prlimit_on_outside_processes(victim):
    body = '''
    import resource
    R = resource.RLIMIT_MSGQUEUE
    N = resource.RLIMIT_NOFILE
    for pid in (@VICTIM@, @PYTEST@):  # soft limits only on the test process, so the fixture can put them back
        attempt("prlimit-set %d" % pid, lambda: resource.prlimit(pid, R, (777777, resource.prlimit(pid, R)[1])))
        attempt("prlimit-nofile %d" % pid, lambda: resource.prlimit(pid, N, (333, resource.prlimit(pid, N)[1])))
    attempt("prlimit-nofile-hard victim", lambda: resource.prlimit(@VICTIM@, N, (5, 5)))
    if not private_pidns():
        for pid in (1, os.getppid()):
            attempt("prlimit-get %d" % pid, lambda: resource.prlimit(pid, R))
    '''
    contained(run(probe(body, victim=victim.pid, pytest=os.getpid()), ESCAPE_TESTS))


def test_own_limits_cannot_be_lifted():
    body = '''
    import resource
    for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_NPROC"):
        r = getattr(resource, name)
        soft, hard = resource.getrlimit(r)
        if hard != resource.RLIM_INFINITY:
            attempt("raise " + name, lambda: resource.setrlimit(r, (resource.RLIM_INFINITY,) * 2) or True)
    st = open("/proc/self/status").read()
    caps = {l.split(":")[0]: l.split()[1] for l in st.splitlines() if l.startswith("Cap")}
    attempt("capabilities", lambda: {k: v for k, v in caps.items() if k != "CapBnd" and int(v, 16)} or None)
    attempt("uid 0", lambda: os.getuid() == 0 or os.geteuid() == 0)
    attempt("no_new_privs off", lambda: "NoNewPrivs:\\t0" in st)
    '''
    contained(run(probe(body), ESCAPE_TESTS))


def _shmget(key: int, size: int, flags: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    shmid = libc.shmget(ctypes.c_int(key), ctypes.c_size_t(size), ctypes.c_int(flags))
    assert shmid >= 0, os.strerror(ctypes.get_errno())
    return shmid


def test_sysv_shared_memory():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_void_p
    key = 0x5A000000 | secrets.randbits(20)
    shmid = _shmget(key, 4096, 0o1000 | 0o600)  # IPC_CREAT, owner only
    addr = libc.shmat(shmid, None, 0)
    ctypes.memmove(addr, SECRET.encode(), len(SECRET))
    body = '''
    _libc.shmat.restype = ctypes.c_void_p
    def attach(i, write):
        a = _libc.shmat(ctypes.c_int(i), None, 0 if write else 0o10000)  # SHM_RDONLY
        if a in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "shmat")
        data = ctypes.string_at(a, 64)
        if write:
            ctypes.memmove(a, b"PWNED", 5)
        return data
    attempt("shmget key", lambda: _libc.shmget(@KEY@, 0, 0) >= 0)
    attempt("shmat id", lambda: attach(@SHMID@, True))
    for i in range(0, 64):  # read only: other segments on the host are not ours to spoil
        attempt("shmat scan %d" % i, lambda: (attach(i, False) if i != @SHMID@ else None))
    big = _libc.shmget(0, ctypes.c_size_t(@BOMB@), 0o1000 | 0o666)
    if big >= 0:
        a = _libc.shmat(big, None, 0)
        ctypes.memset(a, 1, @BOMB@)
        notes.append("made a private segment")
    '''
    try:
        result = run(probe(body, key=key, shmid=shmid, bomb=SHM_BOMB), ESCAPE_TESTS)
        assert ctypes.string_at(addr, len(SECRET)) == SECRET.encode(), "the host segment was overwritten"
        contained(result)
    finally:
        libc.shmdt(ctypes.c_void_p(addr))
        libc.shmctl(shmid, 0, None)


def test_session_keyring():
    libc = ctypes.CDLL(None, use_errno=True)
    serial = libc.syscall(ADD_KEY, b"user", MARK.encode(), SECRET.encode(), len(SECRET), -3)  # session
    if serial < 0:
        pytest.skip(f"add_key: {os.strerror(ctypes.get_errno())}")
    body = '''
    def read(serial):
        buf = ctypes.create_string_buffer(256)
        n = _sys(250, 11, serial, buf, 256)  # KEYCTL_READ
        return buf.raw[:n]
    attempt("read by serial", lambda: read(@SERIAL@))
    for ring in (-1, -2, -3, -4, -5):  # thread, process, session, user, user-session
        attempt("search %d" % ring, lambda: read(_sys(250, 10, ring, b"user", b"@MARK@", 0)))
        attempt("list %d" % ring, lambda: read(ring) or None)
    def describe(serial):
        buf = ctypes.create_string_buffer(256)
        return buf.raw[:_sys(250, 6, serial, buf, 256)]
    attempt("describe by serial", lambda: describe(@SERIAL@))
    '''
    try:
        contained(run(probe(body, serial=serial), ESCAPE_TESTS))
    finally:
        libc.syscall(KEYCTL, 3, serial)  # KEYCTL_REVOKE
        libc.syscall(KEYCTL, 9, serial, -3)  # KEYCTL_UNLINK from the session keyring


def test_deeply_nested_folders_leave_nothing():
    body = '''
    import tempfile
    for base in ("/tmp", tempfile.gettempdir(), os.getcwd()):
        try:
            os.chdir(base)
            os.mkdir("@MARK@-nest")
            os.chdir("@MARK@-nest")
            break
        except OSError:
            pass
    depth = 0
    try:
        for depth in range(3000):
            os.mkdir("d")
            os.chdir("d")
    except OSError as e:
        notes.append("stopped at %d: %s" % (depth, e))
    '''
    start = time.monotonic()
    result = run(probe(body), ESCAPE_TESTS, wall_s=5.0, test_s=4.0)
    contained(result)
    assert time.monotonic() - start < 15
    assert not list(Path("/tmp").glob(f"*/{MARK}-nest")) and not list(Path("/tmp").glob(f"{MARK}-nest"))


def test_filling_the_disk_is_bounded_and_leaves_nothing():
    body = '''
    import tempfile
    total, chunk = 0, b"x" * (1 << 20)
    for base in ("/tmp", tempfile.gettempdir(), os.getcwd(), "/var/tmp", "/dev/shm"):
        i = 0
        while total < (768 << 20):
            try:
                with open(os.path.join(base, "@MARK@-fill-%d" % i), "wb") as f:
                    for _ in range(16):
                        f.write(chunk)
                        total += len(chunk)
            except OSError as e:
                if e.errno != 27:  # a full file (EFBIG) only moves on to the next file
                    notes.append("%s stopped after %d MiB: %s" % (base, total >> 20, e))
                    break
            i += 1
    if total >= (768 << 20):
        ok.append("wrote %d MiB without hitting a limit" % (total >> 20))
    '''
    free = shutil.disk_usage("/tmp").free
    result = run(probe(body), ESCAPE_TESTS, wall_s=8.0, test_s=7.0, output_kb=1024)
    contained(result)
    assert shutil.disk_usage("/tmp").free > free - (256 << 20), "host disk space was used and not given back"


def test_host_files_are_unreadable(tmp_path, canary):
    shm_secret = Path(f"/dev/shm/{MARK}-secret")
    shm_secret.write_text(SECRET)
    body = '''
    def read(p):
        data = open(p, "rb").read(1 << 16)
        if b"@SECRET@" in data:
            return data[:60]
        if p.startswith("/proc/") and private_pidns():
            return None  # the sandbox's own processes (bubblewrap's init): nothing of the host
        return data[:60] or None
    for p in @PATHS@:
        attempt("read " + p, lambda: read(p))
    for d in ("/dev/shm", "/root", "@TMP@", "@PROJECT@", "/home"):
        attempt("list " + d, lambda: [n for n in os.listdir(d) if not n.startswith(".")] or None)
    '''
    paths = ["/etc/shadow", "/etc/passwd", "/etc/hostname", str(shm_secret), str(canary), "/proc/1/environ",
             "/proc/1/cmdline", f"/proc/{os.getpid()}/environ", f"/proc/{os.getpid()}/cmdline",
             f"/proc/{os.getpid()}/cwd/pyproject.toml", f"/proc/{os.getpid()}/root/etc/shadow",
             str(Path(__file__).resolve()), str(Path(__file__).resolve().parents[1] / "pyproject.toml"),
             str(Path(__file__).resolve().parents[1] / ".git/config"), str(Path.home() / ".bash_history"),
             "/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/kmsg", "/dev/mem", "/dev/kvm"]
    try:
        result = run(probe(body, paths=paths, tmp=tmp_path, project=Path(__file__).resolve().parents[1]), ESCAPE_TESTS)
        contained(result)
        assert SECRET not in result.stdout + result.stderr
    finally:
        shm_secret.unlink()


def test_host_paths_do_not_even_exist_inside(tmp_path, canary):
    body = '''
    p, absent = "@PATH@", "@PATH@.absent"
    def differs(fn):
        def outcome(x):
            try:
                return repr(fn(x))[:20]
            except OSError as e:
                return e.errno
        a, b = outcome(p), outcome(absent)
        return (a, b) if a != b else None
    attempt("os.path.exists", lambda: differs(os.path.exists))
    attempt("stat", lambda: differs(lambda x: os.stat(x).st_size))
    attempt("lstat parent", lambda: differs(lambda x: os.lstat(os.path.dirname(x)).st_mode))
    attempt("O_PATH", lambda: differs(lambda x: os.close(os.open(x, os.O_PATH)) or 1))
    attempt("access", lambda: differs(lambda x: os.access(x, os.F_OK)))
    attempt("listdir parent", lambda: os.listdir(os.path.dirname(p)))
    attempt("host project folder", lambda: os.path.isdir("@PROJECT@/tests") or None)
    attempt("host /root", lambda: os.listdir("/root") or None)
    '''
    project = Path(__file__).resolve().parents[1]
    contained(run(probe(body, path=canary, project=project), ESCAPE_TESTS))


def test_host_environment_does_not_leak():
    body = '''
    def scan(data):
        return "@SECRET@" in data or None
    attempt("os.environ", lambda: scan(repr(dict(os.environ))))
    for p in ["self", "1", str(os.getppid())] + [d for d in os.listdir("/proc") if d.isdigit()][:200]:
        attempt("/proc/%s/environ" % p, lambda: scan(open("/proc/%s/environ" % p, "rb").read().decode(errors="replace")))
    '''
    contained(run(probe(body), ESCAPE_TESTS), may_die=False)


RAW = {
    "userfaultfd": "attempt('userfaultfd user-mode', lambda: _sys(323, 1 | 0o2000000))\nattempt('userfaultfd', lambda: "
                   "_sys(323, 0o2000000))",
    "perf_event_open": '''
        import struct
        def perf(pid, cpu, flags):
            attr = struct.pack("IIQQQQQ", 1, 128, 0, 0, 0, 0, flags).ljust(128, b"\\0")
            return _sys(298, ctypes.c_char_p(attr), pid, cpu, -1, 0)
        attempt("perf self user-only", lambda: perf(0, -1, (1 << 5) | (1 << 6)))
        attempt("perf system-wide", lambda: perf(-1, 0, 0))
        ''',
    "bpf": '''
        import struct
        attr = struct.pack("IIII", 2, 4, 4, 1).ljust(72, b"\\0")
        attempt("bpf map", lambda: _sys(321, 0, ctypes.c_char_p(attr), 72))
        ''',
    "io_uring": "params = ctypes.create_string_buffer(120)\nattempt('io_uring_setup', lambda: _sys(425, 8, params))",
    "keyring_syscalls": '''
        attempt("add_key", lambda: _sys(248, b"user", b"@MARK@", b"x", 1, -3))
        attempt("keyctl join", lambda: _sys(250, 1, b"@MARK@"))
        attempt("request_key", lambda: _sys(249, b"user", b"@MARK@", None, 0))
        ''',
    "mount": '''
        attempt("mount tmpfs", lambda: _sys(165, b"none", b"/tmp", b"tmpfs", 0, None))
        attempt("mount proc", lambda: _sys(165, b"proc", b"/tmp", b"proc", 0, None))
        attempt("fsopen", lambda: _sys(430, b"tmpfs", 0))
        attempt("open_tree", lambda: _sys(428, -100, b"/", 1))
        attempt("chroot", lambda: os.chroot("/tmp") or True)
        attempt("mknod block", lambda: os.mknod("/tmp/@MARK@-vda", 0o600 | 0o60000, os.makedev(254, 0)) or True)
        ''',
    "unshare": '''
        for flags, name in ((0x10000000, "user"), (0x20000, "mount"), (0x40000000, "net"), (0x20000000, "pid"),
                            (0x10000000 | 0x20000, "user+mount")):
            attempt("unshare " + name, lambda: _sys(272, flags) == 0)
        ''',
    "setns": '''
        for ns in ("mnt", "net", "pid", "user", "ipc", "uts"):
            for pid in ("1", str(os.getppid())):
                attempt("setns %s/%s" % (pid, ns), lambda: _sys(308, os.open("/proc/%s/ns/%s" % (pid, ns), os.O_RDONLY), 0) == 0 and not private_pidns())
        ''',
    "ptrace": '''
        for pid in (@VICTIM@, @PYTEST@):
            attempt("ptrace attach %d" % pid, lambda: _sys(101, 16, pid, 0, 0) == 0)
            attempt("ptrace seize %d" % pid, lambda: _sys(101, 0x4206, pid, 0, 0) == 0)
        ''',
    "process_vm_readv": '''
        class iovec(ctypes.Structure):
            _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
        buf = ctypes.create_string_buffer(@SIZE@)
        local, remote = iovec(ctypes.addressof(buf), @SIZE@), iovec(@ADDR@, @SIZE@)
        attempt("process_vm_readv", lambda: (_sys(310, @VICTIM@, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0), buf.raw)[1])
        attempt("process_vm_writev", lambda: _sys(311, @VICTIM@, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
        def mem():
            with open("/proc/@VICTIM@/mem", "rb") as f:
                f.seek(@ADDR@)
                return f.read(@SIZE@)
        attempt("/proc/pid/mem", mem)
        ''',
    "pidfd": '''
        attempt("pidfd_open victim", lambda: _sys(434, @VICTIM@, 0))
        attempt("pidfd_getfd victim", lambda: _sys(438, _sys(434, @VICTIM@, 0), 0, 0))
        attempt("pidfd_open pytest", lambda: _sys(434, @PYTEST@, 0))
        ''',
    "open_by_handle_at": '''
        def shocker():
            h = ctypes.create_string_buffer(128)
            ctypes.memmove(h, (120).to_bytes(4, "little"), 4)
            mount_id = ctypes.c_int()
            _sys(303, -100, b"/etc/hostname", h, ctypes.byref(mount_id), 0)
            return _sys(304, os.open("/", os.O_RDONLY), h, 0)
        attempt("open_by_handle_at", shocker)
        ''',
    "kill_everything": '''
        import signal
        if private_pidns():
            attempt("kill -1 (private ns)", lambda: os.kill(-1, 0) or None)  # within the sandbox only
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        else:
            attempt("kill -1 probe", lambda: os.kill(-1, 0) or True)
            for pid in range(1, 400):
                if pid != os.getpid():
                    attempt("signal pid %d" % pid, lambda: os.kill(pid, 0) or True)
        attempt("SIGWINCH victim", lambda: os.kill(@VICTIM@, signal.SIGWINCH) or True)
        attempt("SIGWINCH victim group", lambda: os.killpg(os.getpgid(@VICTIM@), signal.SIGWINCH) or True)
        attempt("SIGWINCH pytest group", lambda: os.kill(-@PGID@, signal.SIGWINCH) or True)
        if not private_pidns():
            attempt("SIGWINCH parent", lambda: os.kill(os.getppid(), signal.SIGWINCH) or True)
        ''',
    "tiocsti_and_tty": '''
        import fcntl, termios
        for fd in (0, 1, 2):
            attempt("TIOCSTI fd %d" % fd, lambda: fcntl.ioctl(fd, termios.TIOCSTI, b"#") is not None)
        attempt("open /dev/tty", lambda: os.close(os.open("/dev/tty", os.O_RDWR)) or True)
        ''',
    "proc_and_sys_writes": '''
        def can_write(p):  # opens for writing only: writes nothing
            os.close(os.open(p, os.O_WRONLY))
            return True
        attempt("oom_score_adj -1000", lambda: open("/proc/self/oom_score_adj", "w").write("-1000"))
        attempt("attr/current", lambda: open("/proc/self/attr/current", "w").write("unconfined"))
        for p in ("/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches",
                  "/sys/kernel/mm/transparent_hugepage/enabled", "/sys/fs/cgroup/cgroup.procs",
                  "/sys/fs/cgroup/cgroup.subtree_control", "/proc/@PYTEST@/oom_score_adj"):
            attempt("open for write " + p, lambda: can_write(p))
        ''',
    "setuid_binary": '''
        import shutil, tempfile
        for base in ("/tmp", tempfile.gettempdir(), os.getcwd()):
            def suid():
                p = os.path.join(base, "@MARK@-suid")
                shutil.copy(sys.executable, p)
                os.chmod(p, 0o4755)
                st = os.stat(p)
                return (st.st_mode & 0o4000 and st.st_uid == 0) or None
            attempt("setuid-root in " + base, suid)
        ''',
}


@pytest.mark.parametrize("name", sorted(RAW))
def test_dangerous_kernel_interfaces(name, victim):
    code = probe(RAW[name], victim=victim.pid, addr=victim.addr, size=victim.size, pytest=os.getpid(),
                 pgid=os.getpgid(0))
    contained(run(code, ESCAPE_TESTS), may_die=True)  # a seccomp kill is a fine answer


def _listeners(tmp_path):
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0)), tcp.listen(8)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(str(tmp_path / "host.sock")), unix.listen(8)
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + MARK), abstract.listen(8)
    socks = {"tcp": tcp, "udp": udp, "unix": unix, "abstract": abstract}
    try:
        tcp6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        tcp6.bind(("::1", 0)), tcp6.listen(8)
        socks["tcp6"] = tcp6
    except OSError:
        pass
    return socks


NET = {
    "tcp": "import socket\nattempt('tcp', lambda: socket.create_connection(('127.0.0.1', @TCP@), "
           "timeout=1).send(b'@MARK@'))",
    "tcp6": "import socket\nattempt('tcp6', lambda: socket.create_connection(('::1', @TCP6@), "
            "timeout=1).send(b'@MARK@'))",
    "udp": "import socket\nattempt('udp', lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'@MARK@', "
           "('127.0.0.1', @UDP@)))",
    "unix_path": "import socket\ndef c():\n    s = socket.socket(socket.AF_UNIX)\n    s.connect('@UNIX@')\n    return "
                 "s.send(b'@MARK@')\nattempt('unix', c)",
    "unix_abstract": "import socket\ndef c():\n    s = socket.socket(socket.AF_UNIX)\n    s.connect('\\0@MARK@')\n    "
                     "return s.send(b'@MARK@')\nattempt('abstract', c)",
    "netlink_sees_host_interfaces": '''
        import socket, struct
        def links():
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)
            s.send(struct.pack("=LHHLLBxHiII", 32, 18, 0x301, 1, 0, 0, 0, 0, 0, 0))
            data = b""
            for _ in range(20):
                chunk = s.recv(65536)
                data += chunk
                if struct.unpack_from("=H", chunk, 4)[0] == 3:
                    break
            names = [n for n in @HOSTIFS@ if n.encode() + b"\\0" in data and n != "lo"]
            return names or None
        attempt("netlink", links)
        ''',
    "packet_and_raw": '''
        import socket
        attempt("AF_PACKET", lambda: socket.socket(17, socket.SOCK_RAW, 0x0300) and True)
        attempt("raw ICMP", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1) and True)
        ''',
    "raw_syscall_socket": '''
        import socket, struct
        def c():
            fd = _sys(41, 2, 1, 0)
            addr = struct.pack("<H", 2) + struct.pack(">H", @TCP@) + socket.inet_aton("127.0.0.1") + bytes(8)
            return _sys(42, fd, ctypes.c_char_p(addr), 16) == 0
        attempt("syscall socket+connect", c)
        ''',
}


@pytest.mark.parametrize("name", sorted(NET))
def test_network_cannot_reach_the_host(name, tmp_path):
    socks = _listeners(tmp_path)
    if name == "tcp6" and "tcp6" not in socks:
        pytest.skip("no IPv6 loopback here")
    ports = {k: s.getsockname()[1] for k, s in socks.items() if k in ("tcp", "udp", "tcp6")}
    ifs = [n for _, n in socket.if_nameindex()]
    code = probe(NET[name], tcp=ports["tcp"], udp=ports["udp"], tcp6=ports.get("tcp6", 1), unix=tmp_path / "host.sock",
                 hostifs=ifs)
    try:
        result = run(code, ESCAPE_TESTS)
        reached = [k for k, s in socks.items() if select.select([s], [], [], 0)[0]]
        assert not reached, f"ESCAPE: the program reached host listeners {reached}"
        contained(result, may_die=True)
    finally:
        for s in socks.values():
            s.close()


SPAWN = {
    "fork": "pid = os.fork()\nif pid == 0:\n    name_me('f')\n    time.sleep(30)\n    os._exit(0)\nok.append('forked')",
    "double_fork_daemon": "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        name_me('d')\n        "
                          "time.sleep(30)\n    os._exit(0)\nok.append('forked')",
    "vfork_raw": "r = _sys(58)\nif r == 0:\n    _libc._exit(0)\nok.append('vforked')",
    "clone_raw": "r = _sys(56, 17, 0, 0, 0, 0)\nif r == 0:\n    name_me('c')\n    time.sleep(30)\n    "
                 "os._exit(0)\nok.append('cloned')",
    "subprocess": "import subprocess\nattempt('subprocess', lambda: subprocess.Popen(['sleep', '987.65']).pid)",
    "os_system": "attempt('os.system', lambda: os.system('sleep 987.65 &') == 0)",
    "posix_spawn": "attempt('posix_spawn', lambda: os.posix_spawn('/usr/bin/sleep', ['sleep', '987.65'], {}))",
    "pty_spawn": "import pty\ndef spawn():\n    pid, fd = pty.fork()\n    if pid == 0:\n        name_me('p')\n"
                 "        time.sleep(30)\n        os._exit(0)\n    return pid\nattempt('pty', spawn)",
    "multiprocessing": "import multiprocessing\ndef w():\n    name_me('m')\n    time.sleep(30)\n"
                       "attempt('multiprocessing', lambda: multiprocessing.Process(target=w).start() or True)",
}


@pytest.mark.parametrize("name", sorted(SPAWN))
def test_processes_started_inside_do_not_survive(name):
    result = run(probe(dedent(SPAWN[name])), ESCAPE_TESTS, wall_s=2.0)
    # the autouse fixture fails the test if a marked process outlives the run
    contained(result, may_die=True)


def test_cross_run_persistence():
    body = '''
    import tempfile
    places = {"/tmp", "/var/tmp", "/dev/shm", tempfile.gettempdir(), os.path.expanduser("~"), os.getcwd()}
    for d in places:
        attempt("found a file of an earlier run in " + d, lambda: open(os.path.join(d, "@MARK@-persist")).read() or None)
    for d in places:
        try:
            open(os.path.join(d, "@MARK@-persist"), "w").write("here")
        except OSError:
            pass
    '''
    run(probe(body), ESCAPE_TESTS)
    contained(run(probe(body), ESCAPE_TESTS))


def test_sysv_shared_memory_cannot_hold_more_than_the_memory_limit():
    body = """
    _libc.shmat.restype = ctypes.c_void_p
    held = 0
    for i in range(6):
        sid = _libc.shmget(0, ctypes.c_size_t(64 << 20), 0o1000 | 0o600)
        a = _libc.shmat(sid, None, 0) if sid >= 0 else None
        if a in (None, ctypes.c_void_p(-1).value):
            notes.append("stopped after %d MiB" % (held >> 20))
            break
        ctypes.memset(a, 1, 64 << 20)
        _libc.shmdt(ctypes.c_void_p(a))  # detached, it no longer counts in the address space
        held += 64 << 20
    if held > (256 << 20):
        ok.append("holds %d MiB of SysV shared memory under a 128 MiB address-space limit" % (held >> 20))
    """
    contained(run(probe(body), ESCAPE_TESTS, memory_mb=128, wall_s=6.0, test_s=4.0))


def test_sysv_message_queues_cannot_hold_more_than_the_memory_limit():
    body = """
    class Msg(ctypes.Structure):
        _fields_ = [("mtype", ctypes.c_long), ("text", ctypes.c_char * 8192)]
    m, queued = Msg(1, b"x" * 8192), 0
    for i in range(20000):
        q = _libc.msgget(0, 0o1000 | 0o600)
        if q < 0 or any(_libc.msgsnd(q, ctypes.byref(m), 8192, 0o4000) != 0 for _ in range(2)):
            notes.append("stopped after %d MiB" % (queued >> 20))
            break
        queued += 16384
    if queued > (256 << 20):
        ok.append("holds %d MiB in SysV message queues under a 128 MiB address-space limit" % (queued >> 20))
    """
    contained(run(probe(body), ESCAPE_TESTS, memory_mb=128, wall_s=6.0, test_s=4.0))


def test_threads_are_capped():
    body = """
    import threading
    threading.stack_size(32768)
    _libc.mallopt(-8, 1)  # M_ARENA_MAX = 1: a thread then costs ~60 KiB of address space
    n = 0
    try:
        for n in range(1, 1501):
            threading.Thread(target=time.sleep, args=(1.5,), daemon=True).start()
    except RuntimeError as e:
        notes.append("stopped at %d: %s" % (n, e))
    else:  # 10,000 were reached at the default memory_mb; the host's pid_max is shared by every sandbox
        ok.append("started %d threads under memory_mb=256, no task limit" % n)
    """
    contained(run(probe(body), ESCAPE_TESTS, memory_mb=256, wall_s=6.0, test_s=4.0))


def test_host_wide_aio_pool_is_out_of_reach():
    body = """
    ctx = ctypes.c_ulong(0)  # /proc/sys/fs/aio-nr counts every namespace against one aio-max-nr (65536 here)
    attempt("io_setup took 32768 events of the host-wide AIO pool", lambda: _sys(206, 32768, ctypes.byref(ctx)) == 0)
    """
    contained(run(probe(body), ESCAPE_TESTS))


def test_host_files_cannot_be_locked():
    import fcntl
    import threading

    target = os.path.realpath(sys.executable)  # bound read-only into the sandbox
    body = """
    import fcntl
    fd = os.open("@PATH@", os.O_RDONLY)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            ok.append("flock(LOCK_EX) on the host's @PATH@")
            break
        except OSError:
            time.sleep(0.02)
    time.sleep(1.5)
    """
    box = {}
    worker = threading.Thread(target=lambda: box.setdefault("r", run(probe(body, path=target), ESCAPE_TESTS, wall_s=6.0,
                                                                     test_s=4.0)))
    worker.start()
    held, deadline = False, time.monotonic() + 3.0
    with open(target, "rb") as f:
        while worker.is_alive() and time.monotonic() < deadline and not held:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(f, fcntl.LOCK_UN)
            except BlockingIOError:
                held = True
            time.sleep(0.1)
    worker.join()
    assert not held, f"ESCAPE: a sandboxed program held an exclusive lock on the host's {target}"
    contained(box["r"])


def test_a_harness_does_not_outlive_its_killed_caller():
    """If the reward worker dies (pool timeout_s < wall_s, Ctrl-C, OOM), nothing it started may live on."""
    program = (f"import ctypes, os, sys, json, time\nctypes.CDLL(None).prctl(15, b'{MARK}o', 0, 0, 0)\n"
               "fd = int(sys.argv[2])\n"
               "os.write(fd, (json.dumps({'ready': True, 'names': {'add': {'callable': True}}}) + '\\n').encode())\n"
               "time.sleep(3600)  # never reads a request: one bigger than a pipe blocks the harness's write\n")
    tests = ["assert add(list(range(30000))) == 0", "assert add(1, 2) == 3"]
    script = ("import sys\nfrom aha.rewards.code import run_python, SandboxLimits\n"
              f"run_python({program!r}, {tests!r}, limits=SandboxLimits(wall_s=3.0, test_s=0.5))\n")
    caller = subprocess.Popen([sys.executable, "-c", script])
    start, harness = time.monotonic(), None
    try:
        while time.monotonic() - start < 5 and not (harness and _marked_processes()):
            kids = Path(f"/proc/{caller.pid}/task/{caller.pid}/children")
            found = kids.read_text().split() if kids.exists() else []
            harness = int(found[0]) if found else harness
            time.sleep(0.05)
        assert harness, "the harness did not start"
    finally:
        caller.kill()
        caller.wait()
    time.sleep(1.0)  # well inside the caller's wall_s: the harness dies with its caller, not on a timer
    try:
        state = Path(f"/proc/{harness}/stat").read_text().rsplit(")", 1)[1].split()[0]
        alive = state != "Z" and "sandbox/harness" in Path(f"/proc/{harness}/cmdline").read_text()
    except OSError:
        alive = False
    if alive:
        os.kill(harness, signal.SIGKILL)  # ours: started by our caller
    assert not alive, "HOST DAMAGE: the harness (and its sandbox) outlived its killed caller"
    assert not _marked_processes(), "HOST DAMAGE: the sandboxed program outlived its killed caller"


# ---- resource bombs: fail fast, and the host keeps working
BOMBS = {
    "memory": ("x = []\ntry:\n    y = bytearray(8 << 30)\nexcept MemoryError:\n    pass\n"
               "while True:\n    x.append(bytearray(16 << 20))\n", 3.0),
    "cpu_threads": ("import threading\ndef spin():\n    while True:\n        pass\n"
                    "for _ in range(8):\n    threading.Thread(target=spin, daemon=True).start()\nspin()\n", 1.5),
    "thread_bomb_10000": ("import threading, time\nthreading.stack_size(65536)\nts = []\n"
                          "for i in range(10000):\n    t = threading.Thread(target=time.sleep, args=(30,), "
                          "daemon=True)\n"
                          # glibc's default arenas stop it (see test_threads_are_capped)
                          "    t.start()\n    ts.append(t)\n", 3.0),
    "fd_exhaustion": ("fds = []\nwhile True:\n    fds.append(os.open('/dev/null', os.O_RDONLY))\n", 3.0),
    "sleep_past_wall": ("name_me('s')\ntime.sleep(60)\n", 1.5),
    "huge_stderr": ("while True:\n    sys.stderr.write('E' * (1 << 20))\n    sys.stdout.write('O' * (1 << 20))\n", 3.0),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_resource_bombs_fail_fast(name):
    program, wall = BOMBS[name]
    start = time.monotonic()
    result = run(probe("name_me('b')\n" + program), ESCAPE_TESTS, wall_s=wall, memory_mb=256)
    assert time.monotonic() - start < wall + 5, "the run outlived its wall clock"
    assert 0 in result.errors, "a bomb passed"
    assert len(result.stdout) + len(result.stderr) < (1 << 20), "unbounded output came back"
    assert subprocess.run(["true"]).returncode == 0  # the host can still start processes


# ================================================================ honest controls

ADD = "def add(a, b):\n    return a + b\n"


def test_control_partial_credit():
    result = run(ADD, ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 5"])
    assert (result.passed, result.total) == (2, 3) and 2 in result.errors
    assert code_tests(f"```python\n{ADD}```", {"tests": ADD_TESTS}, wall_s=4.0, test_s=1.0) == 1.0


def test_control_stdin_stdout():
    echo = "import sys\nsys.stdout.write(sys.stdin.read())\n"
    tests = [{"input": "hello\n", "output": "hello"}, {"input": "a b\nc\n", "output": "a b\nc\n"},
             {"input": "x", "output": "y"}]
    result = run(echo, tests)
    assert result.passed == 2 and 2 in result.errors
    total = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\nsys.exit(0)\n"
    assert run(total, [{"input": "1 2\n3\n", "output": "6"}, {"input": "10", "output": "10\n"}]).passed == 2
    assert run("print(input()[::-1])\nexit()\n", [{"input": "abc", "output": "cba"}]).passed == 1


def test_control_standard_library():
    program = dedent('''
        import math, itertools, collections, functools, heapq, bisect, re, fractions
        def solve(xs):
            c = collections.Counter(xs)
            return (math.gcd(12, 18), len(list(itertools.combinations(sorted(c), 2))), c.most_common(1)[0][0],
                    heapq.nsmallest(2, xs), bisect.bisect_left(sorted(xs), 3), str(fractions.Fraction(1, 3)),
                    re.sub(r"\\d", "#", "a1b22"), functools.reduce(lambda a, b: a * b, xs))
    ''')
    assert run(program, ["assert solve([3, 1, 3, 2]) == (6, 3, 3, [1, 2], 2, '1/3', 'a#b##', 18)"]).passed == 1


def test_control_return_types():
    program = dedent('''
        def pair(): return (1, "a")
        def uniq(): return {3, 1}
        def nothing(): return None
        def inf(): return float("inf")
        def nan(): return float("nan")
        def frozen(): return frozenset({1})
        def cplx(): return 1 - 2j
        def raw(): return b"\\x00\\xff"
        def table(): return {"a": [1, (2, 3)], 4: {5}}
        def big(): return 2 ** 200
        def text(): return "héllo ✓\\n\\"q\\""
        def negzero(): return -0.0
        def flag(): return True
    ''')
    tests = ["assert pair() == (1, 'a') and isinstance(pair(), tuple)", "assert uniq() == {1, 3}", "assert nothing() "
            "is None",
             "assert inf() == float('inf')", "import math\nassert math.isnan(nan())", "assert frozen() == "
                     "frozenset({1})",
             "assert cplx() == 1 - 2j", "assert raw() == b'\\x00\\xff'", "assert table() == {'a': [1, (2, 3)], 4: {5}}",
             "assert big() == 2 ** 200", "assert text() == 'héllo ✓\\n\"q\"'", "import math\nassert math.copysign(1, "
                     "negzero()) == -1",
             "assert flag() is True"]
    result = run(program, tests)
    assert result.passed == len(tests), result.errors


def test_control_expected_exceptions():
    program = "class Oops(Exception):\n    pass\ndef div(a, b):\n    if b == 0:\n        raise ValueError('b is zero')\n" \
              "    if b < 0:\n        raise Oops('negative')\n    return a / b\n"
    tests = ["try:\n    div(1, 0)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError('no ValueError')",
             "assert div(6, 3) == 2.0",
             "try:\n    div(1, -1)\nexcept Exception:\n    pass\nelse:\n    raise AssertionError('no exception')",
             "assert div(1, 0) == 0"]
    result = run(program, tests)
    assert result.passed == 3 and 3 in result.errors and "ValueError" in result.errors[3]


def test_control_humaneval_check_setup_kwargs_and_builtins():
    program = dedent('''
        import math
        def area(r, *, places=None):
            a = math.pi * r * r
            return round(a, places) if places is not None else a
        def sq(i):
            return i * i
        def perm(xs):
            return list(reversed(xs))
        def uniq(xs):
            return list(dict.fromkeys(xs))
        LIMIT = 10 ** 9 + 7
        PRIMES = [2, 3, 5]
    ''')
    tests = ["def check(candidate):\n    assert abs(candidate(2) - 12.566) < 0.01\n    assert candidate(1, places=2) "
             "== 3.14\ncheck(area)",
             "assert isclose(area(2), 12.566, rel_tol=1e-3)", "assert all(sq(i) == i * i for i in range(5))",
             "assert sorted(perm([3, 1, 2])) == [1, 2, 3]", "assert set(uniq([1, 1, 2])) == {1, 2}",
             "assert LIMIT == 1000000007 and PRIMES == [2, 3, 5]", "for i in range(3):\n    assert sq(i) == i ** 2"]
    result = run(program, tests, setup="from math import isclose")
    assert result.passed == len(tests), result.errors


def test_control_prints_temp_files_threads_and_work():
    program = dedent('''
        import tempfile, threading, sys
        sys.setrecursionlimit(5000)
        def add(a, b):
            print("debug:", a, b)
            print("to stderr", file=sys.stderr)
            return a + b
        def roundtrip(text):
            with tempfile.NamedTemporaryFile("w+", suffix=".txt") as f:
                f.write(text)
                f.flush()
                f.seek(0)
                return f.read()
        def threaded():
            out = []
            t = threading.Thread(target=lambda: out.append(1))
            t.start(); t.join()
            return out
        def work(n):
            return sum(range(n))
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
    ''')
    tests = ["assert add(1, 2) == 3", "assert roundtrip('hi') == 'hi'", "assert threaded() == [1]",
             "assert work(10 ** 6) == 499999500000", "assert depth(1500) == 1500"]
    result = run(program, tests)
    assert result.passed == len(tests), result.errors


REAL_RETURNS = {  # what working solutions return; the old design passed them all
    "Counter": ("import collections\ndef f():\n    return collections.Counter('aab')\n", "assert f() == {'a': 2, 'b': "
            "1}"),
    "defaultdict": ("import collections\ndef f():\n    d = collections.defaultdict(int)\n    d['a'] += 2\n    return "
                    "d\n",
                    "assert f() == {'a': 2}"),
    "OrderedDict": ("import collections\ndef f():\n    return collections.OrderedDict(a=1)\n",
                    "assert f() == {'a': 1}"),
    "namedtuple": ("import collections\nP = collections.namedtuple('P', 'x y')\ndef f():\n    return P(1, 2)\n",
                   "assert f() == (1, 2)"),
    "numpy_int64": ("import numpy as np\ndef f():\n    return np.array([1, 2]).sum()\n", "assert f() == 3"),
    "numpy_float64": ("import numpy as np\ndef f():\n    return np.mean([1.0, 2.0])\n", "assert f() == 1.5"),
}


@pytest.mark.parametrize("name", sorted(REAL_RETURNS))
def test_control_common_return_types(name):
    program, test = REAL_RETURNS[name]
    result = run(program, [test])
    assert result.passed == 1, f"an honest solution returning a {name} fails: {result.errors}"
