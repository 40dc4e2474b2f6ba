"""Second red team of the code sandbox (fresh eyes after tests/test_sandbox_attacks.py).

Attacks assert that the attack fails and the host is untouched; honest controls assert that
a correct program a model would plausibly write passes. A real finding is left FAILING (not
xfail); a limit that docs/rewards.md states is an xfail(strict=True) naming the sentence.

Sections: A. the judging process (crashes and mis-judgements it can be led into),
B. resources the limits do not count, C. exec and concurrency, D. extract_code,
E. honest programs (statement tests), F. honest programs (stdin/stdout tests).
Every resource attack runs at a small, safe scale; the message states the measured rate and
the bound it extrapolates to.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import secrets
import signal
import sys
import threading
import time
from pathlib import Path
from textwrap import dedent

import pytest

from aha.rewards.code import SandboxError, SandboxLimits, code_tests, extract_code, run_python, sandbox_support

MISSING = sandbox_support()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"no full sandbox on this machine: {MISSING}")

MARK = f"ahapwn2{secrets.token_hex(4)}"
FAST = SandboxLimits(wall_s=5.0, test_s=1.0, cpu_s=4, memory_mb=512, output_kb=256)
OUT = "import os, sys, json, time\nfd = int(sys.argv[2])\n"  # serve mode: the runner's reply channel


def run(code: str, tests: list, setup: str = "", entry_point=None, **limits):
    """run_python under FAST limits; an exception out of it is itself a finding: the docs
    promise it never raises for anything the program does."""
    try:
        return run_python(code, tests, setup, dataclasses.replace(FAST, **limits), entry_point=entry_point)
    except SandboxError as err:
        raise AssertionError(f"run_python raised for a program's behaviour: {str(err)[-600:]}") from err


def _meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) << 10
    return 0


def _marked_processes() -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and comm.startswith(MARK[:15]):
            found.append(f"{entry.name} {comm}")
    return found


@pytest.fixture(autouse=True)
def host_untouched():
    """Around every test: the test process's rlimits, no marked file or process left behind."""
    limits = {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")}
    yield
    problems = []
    now = {n: resource.getrlimit(getattr(resource, n)) for n in limits}
    if now != limits:
        problems.append(f"rlimits of the test process changed: {now}")
    deadline = time.monotonic() + 1.0
    while _marked_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    for what in _marked_processes():
        problems.append(f"process left running: {what}")
        os.kill(int(what.split()[0]), signal.SIGKILL)
    for root in ("/tmp", "/var/tmp", "/dev/shm", str(Path.cwd())):
        for path in Path(root).glob(f"*{MARK}*") if Path(root).is_dir() else []:
            problems.append(f"file left on the host: {path}")
    assert not problems, "HOST DAMAGE: " + "; ".join(problems)


# ================================================================ A. the judging process

# A.1 The harness formats a failing test's exception with str(err) outside any try. A reply
# may carry an int literal in hex (the decoder accepts it, with no digit limit), and str() of
# an int over 4300 digits raises ValueError: a test that keeps the returned value in its
# exception (`assert r == x, r`, a dict lookup's KeyError) then kills the harness, and
# run_python raises SandboxError("the sandbox harness failed") for a program's behaviour,
# losing every test it had passed.
# the program swaps the runner's encoder for one value (serve() looks `to_data` up at each call)
BIG_HEX_REPLY = ("import sys\nrunner = sys.modules['__main__']\n_encode = runner.to_data\n"
                 "runner.to_data = lambda v: {'i': 'f' * 5000} if v == 'BIG' else _encode(v)\n"
                 "def add(a, b):\n    return 'BIG' if (a, b) == (1, 2) else a + b\n")
UNPRINTABLE = {
    "assert_message_is_the_value": "r = add(1, 2)\nassert r == 3, r",
    "assert_message_is_a_tuple": "r = add(1, 2)\nassert r == 3, (r, 3)",
    "keyerror_on_the_value": "expected = {3: 'three'}\nassert expected[add(1, 2)] == 'three'",
}


@pytest.mark.parametrize("name", sorted(UNPRINTABLE))
def test_a_value_whose_str_raises_does_not_kill_the_harness(name):
    result = run(BIG_HEX_REPLY, ["assert add(1, 1) == 2", UNPRINTABLE[name], "assert add(2, 2) == 4"])
    assert result.passed == 2 and 1 in result.errors, result.errors


def test_an_honest_big_int_in_an_assert_message_does_not_kill_the_harness():
    # today the runner cannot even send 2**20000 (see test_honest_big_ints); once it can, this
    # is the honest way into the crash above
    result = run("def f(n):\n    return 2 ** n\n", ["r = f(20000)\nassert r == 2 ** 20000 + 1, r", "assert f(3) == 8"])
    assert result.passed == 1 and 0 in result.errors


# A.2 TestTimeout and CandidateError are BaseExceptions so that `except Exception` does not
# swallow them, but a test that checks for "raises" with a bare `except:` (or `except
# BaseException`) still swallows them: a function that hangs, crashes the sandbox or breaks
# the protocol then passes a test it should fail. The sandbox is also left busy, so the next
# call of the same test would read the late reply of this one.
RAISES_TESTS = ["try:\n    f(-1)\nexcept:\n    pass\nelse:\n    raise AssertionError('no exception')",
                "try:\n    f(-2)\n    raised = False\nexcept BaseException:\n    raised = True\nassert raised"]
SWALLOWED = {
    "hangs": "import time\ndef f(x):\n    time.sleep(30)\n",
    "kills_its_sandbox": "import os\ndef f(x):\n    os._exit(0)\n",
    "breaks_the_protocol": OUT + "def f(x):\n    os.write(fd, b'not json\\n')\n    time.sleep(30)\n",
}


@pytest.mark.parametrize("name", sorted(SWALLOWED))
def test_a_timeout_or_crash_swallowed_by_the_test_does_not_pass(name):
    result = run(SWALLOWED[name], RAISES_TESTS, test_s=0.5, wall_s=4.0)
    assert result.passed == 0, f"HACK {name} passed {result.passed}/2 'must raise' tests without raising"


def test_control_raising_passes_the_same_tests():
    assert run("def f(x):\n    raise ValueError(x)\n", RAISES_TESTS).passed == 2


# A.3 Reply frames with JSON and literal edge cases: never a pass, never a crash or a hang.
FRAMES = [
    b'{"value": NaN}', b'{"value": Infinity}', b'{"value": "nan"}', b'{"value": "3", "value": "4"}',
    b'{"raised": "ValueError", "value": "4"}', b'{"value": "\'\\ud800\'"}', b'{"value": "\'\\\\ud800\'"}',
    b'{"value": "0x' + b'f' * 50000 + b'"}', b'{"raised": "AssertionError", "message": 1e400}',
    b'{"raised": "ValueError", "message": ' + b'1' * 5000 + b'}', b'{"value": "' + b'(' * 150 + b')' * 150 + b'"}',
    b'{"value": "' + b'[' * 250 + b']' * 250 + b'"}', b'{"value": "1.' + b'0' * 500000 + b'1"}',
    b'{"value": "\xff\xfe"}', b'{"value": "complex(3.0, 1.0)", "raised": "StopIteration"}',
    b'{"value": "b\'3\'"}', b'{"value": "3j"}', b'{"value": "frozenset()"}',
]


def test_odd_reply_frames_score_nothing_and_break_nothing():
    program = OUT + f"FRAMES = {FRAMES!r}\n" + ("def f(i):\n    os.write(fd, FRAMES[i] + b'\\n')\n    time.sleep(30)\n")
    tests = [f"assert f({i}) == 3" for i in range(len(FRAMES))]
    start = time.monotonic()
    result = run(program, tests, test_s=0.5, wall_s=30.0)
    assert result.passed == 0, f"HACK: frames {[FRAMES[i][:40] for i in range(len(FRAMES)) if i not in result.errors]} passed"
    assert time.monotonic() - start < 20, "the harness was slow on a frame"


# A.4 entry_point names the function the tests call; when that name is a builtin's, the
# harness drops the program's function (builtins are never shown to tests) and the test
# silently calls the builtin: a wrong program passes.
def test_an_entry_point_named_like_a_builtin_tests_the_program():
    wrong = "def sum(xs):\n    return 0\ndef max(xs):\n    return -1\n"
    result = run(wrong, ["assert sum([1, 2, 3]) == 6", "assert max([1, 3, 2]) == 3"], entry_point=["sum", "max"])
    assert result.passed == 0, f"HACK: a wrong `sum`/`max` passed {result.passed}/2 with entry_point naming them (the builtins were tested)"


# ================================================================ B. resources the limits do not count

XATTR = '''
import os, time, ctypes
ctypes.CDLL(None).prctl(15, b"@MARK@"[:15], 0, 0, 0)
path, held, err = "/tmp/f", 0, None
os.close(os.open(path, os.O_CREAT | os.O_WRONLY))
try:
    for i in range(@N@):
        os.setxattr(path, "user.%d" % i, b"y" * 65536)
        held += 65536
except OSError as e:
    err = repr(e)
def held_mib():
    return held >> 20, err
def linger():
    time.sleep(30)
'''


def test_tmpfs_xattrs_cannot_hold_kernel_memory_past_the_limits():
    """user.* xattrs on the sandbox's tmpfs (Linux >= 6.6) live in unreclaimable kernel slab:
    not in RLIMIT_AS, not in the tmpfs --size. Measured here: 8000 x 64 KiB = 1 GiB of
    SUnreclaim in 0.97 s under memory_mb=256, disk_mb=1 (kmalloc rounds each value to
    128 KiB, so ~2x the data). The only bound is the tmpfs's inode space, nr_inodes x 1 KiB,
    and nr_inodes defaults to RAM/2 pages (3,085,457 on this 24 GiB host): ~3 GiB of xattr
    data, ~6 GiB of slab, a quarter of RAM per sandbox; two or four reward workers OOM the
    host. Here: 10 MiB of xattrs under disk_mb=1, and the host must get the memory back."""
    program = XATTR.replace("@MARK@", MARK).replace("@N@", "160")
    before = _meminfo("SUnreclaim")
    result = run(program, ["r = held_mib()\nassert r[0] <= 2, 'held %d MiB of xattrs in a 1 MiB /tmp: %s' % r",
                           "linger()"],
                 disk_mb=1, memory_mb=128, test_s=0.5, wall_s=4.0)
    time.sleep(0.3)
    after = _meminfo("SUnreclaim")
    assert after - before < (64 << 20), f"HOST DAMAGE: {(after - before) >> 20} MiB of kernel memory not given back"
    assert 0 not in result.errors, (f"ESCAPE: {result.errors[0]}: unreclaimable kernel memory outside memory_mb and "
                                    "disk_mb, bounded only by nr_inodes x 1 KiB (GiBs per sandbox)")


def test_tmpfs_inodes_cannot_hold_kernel_memory_past_the_disk_limit():
    """Each file in /tmp costs ~1.5 KiB of kernel memory (inode, dentry, long name) that the
    tmpfs --size does not count; nr_inodes is left at its default (RAM/2 pages). Measured:
    50,000 files = 74 MiB of slab in 0.76 s, so cpu_s=10 buys ~1 GiB per sandbox beyond
    memory_mb and disk_mb (up to ~4.5 GiB at 3 M inodes). Here: 20,000 files in a 1 MiB /tmp."""
    program = dedent('''
        import os
        made, err = 0, None
        try:
            for i in range(20000):
                os.close(os.open("/tmp/" + ("%06d" % i) * 40, os.O_CREAT | os.O_WRONLY))
                made += 1
        except OSError as e:
            err = repr(e)
        s = os.statvfs("/tmp")
        def report():
            return made, s.f_files, err
    ''')
    result = run(program, ["r = report()\nassert r[0] < 20000, 'made %d files (nr_inodes %d) in a 1 MiB /tmp' % r[:2]"],
                 disk_mb=1, test_s=3.0, wall_s=6.0)
    assert result.passed == 1, f"ESCAPE: {result.errors[0]} (~1.5 KiB of kernel memory each, outside disk_mb)"


def test_one_sandbox_cannot_take_every_core():
    """RLIMIT_CPU bounds a process's CPU-seconds, not its cores: threads doing GIL-free work
    (hashing, zlib, numpy) run on every CPU of the host. Measured here: 1.97 cores of 2. On a
    64-core training host one program takes them all for wall_s (and gets a fresh cpu_s at
    each restart), so honest programs in the other reward workers time out and score 0."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: nothing to take")
    program = dedent('''
        import hashlib, threading, time
        def cores():
            end = time.time() + 0.6
            def spin():
                buf = b"x" * (1 << 20)
                while time.time() < end:
                    hashlib.sha256(buf).digest()
            c0, w0 = time.process_time(), time.time()
            ts = [threading.Thread(target=spin) for _ in range(4)]
            [t.start() for t in ts]
            [t.join() for t in ts]
            return (time.process_time() - c0) / (time.time() - w0)
    ''')
    result = run(program, ["r = cores()\nassert r < 1.3, 'one sandbox used %.2f cores' % r"], test_s=3.0)
    assert result.passed == 1, f"ESCAPE: {result.errors[0]} of this {os.cpu_count()}-CPU host"


def test_pipes_and_memfds_stay_small():
    """Kernel memory through pipe buffers and memfds is bounded by 64 fds, pipe-max-size and
    RLIMIT_FSIZE: at most ~32 MiB of pipes or 64 x output_kb of memfd."""
    program = dedent('''
        import os, fcntl
        held, fds = 0, []
        try:
            while True:
                r, w = os.pipe()
                fds += [r, w]
                try:
                    fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
                except OSError:
                    pass
                os.set_blocking(w, False)
                try:
                    while True:
                        held += os.write(w, b"z" * 65536)
                except BlockingIOError:
                    pass
        except OSError:
            pass
        def held_mib():
            return held >> 20
    ''')
    result = run(program, ["r = held_mib()\nassert r <= 40, 'held %d MiB in pipes' % r"], test_s=3.0)
    assert result.passed == 1, f"ESCAPE: {result.errors}"


# ================================================================ C. exec and concurrency

EXEC_PROBE = r'''
import os, sys, resource
bad = []
lim = repr([resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NOFILE,
                                             resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC)])
if lim != sys.argv[1]:
    bad.append("limits %s != %s" % (lim, sys.argv[1]))
st = dict(l.split(":", 1) for l in open("/proc/self/status"))
for k, v in (("NoNewPrivs", "1"), ("Seccomp", "2")):
    if st[k].strip() != v:
        bad.append("%s=%s" % (k, st[k].strip()))
if int(st["CapEff"].strip(), 16) or int(st["CapBnd"].strip(), 16):
    bad.append("capabilities " + st["CapEff"].strip())
if 0 in os.getresuid() or 0 in os.getresgid():
    bad.append("root ids")
try:
    pid = os.fork()
except OSError:
    pass
else:
    if pid == 0:
        os._exit(0)
    bad.append("fork worked")
for p in ("/usr/MARK", "/aha/MARK", "/MARK"):
    try:
        open(p, "w").close()
        bad.append("wrote " + p)
    except OSError:
        pass
print("contained" if not bad else "ESCAPED: %s" % bad)
'''.replace("MARK", MARK)


def test_exec_keeps_every_layer():
    """execve is allowed: the exec'd interpreter (the host's /usr/bin/python3, the venv's, or a
    copy run from a memfd) keeps the rlimits, no_new_privs, seccomp, Landlock and the uid."""
    program = dedent(f'''
        import os, sys, resource, shutil
        lim = repr([resource.getrlimit(r) for r in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NOFILE,
                                                     resource.RLIMIT_FSIZE, resource.RLIMIT_NPROC)])
        target = sys.stdin.readline().strip()
        if target == "memfd":
            fd = os.memfd_create("py", 0)
            with open(sys.executable, "rb") as src:
                os.write(fd, src.read())
            target = "/proc/self/fd/%d" % fd
        sys.stdout.flush()
        os.execv(target, [target, "-I", "-c", {EXEC_PROBE!r}, lim])
    ''')
    tests = [{"input": "/usr/bin/python3\n", "output": "contained"}, {"input": sys.executable + "\n",
                                                                      "output": "contained"},
             {"input": "memfd\n", "output": "contained"}]
    result = run(program, tests, output_kb=16 << 10)
    escaped = [e for e in result.errors.values() if "ESCAPED" in e]
    assert not escaped, f"ESCAPE: {escaped}"
    assert result.passed >= 2, f"the exec probes did not run: {result.errors}"


def test_two_sandboxes_at_once_do_not_share_a_thread_limit_or_files():
    hog = dedent('''
        import threading, time, os
        threading.stack_size(65536)
        ts = [threading.Thread(target=time.sleep, args=(1.5,), daemon=True) for _ in range(60)]
        [t.start() for t in ts]
        open("/tmp/shared-@MARK@", "w").write("hog")
        def uid():
            return os.getuid()
    ''').replace("@MARK@", MARK)
    other = dedent('''
        import threading, time, os
        threading.stack_size(65536)
        time.sleep(0.3)
        started = 0
        try:
            for _ in range(40):
                threading.Thread(target=time.sleep, args=(0.5,), daemon=True).start()
                started += 1
        except RuntimeError:
            pass
        seen = os.path.exists("/tmp/shared-@MARK@")
        def report():
            return started, seen, os.getuid()
    ''').replace("@MARK@", MARK)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("hog", run(hog, ["assert uid() > 0"], test_s=3.0)))
    t.start()
    time.sleep(0.05)
    result = run(other, ["r = report()\nassert r[:2] == (40, False), r"], test_s=3.0)
    t.join()
    assert result.passed == 1, f"sandboxes interfered: {result.errors}"
    assert box["hog"].passed == 1, box["hog"].errors


# ================================================================ D. extract_code

def test_a_text_block_before_the_solution_is_not_taken_for_code():
    """_FENCE skips an opening fence with another language (```text) but then takes its
    CLOSING fence as a bare opening one: the prose between the two blocks becomes the program."""
    completion = ("Input format:\n```text\n3\n1 2 3\n```\nSolution:\n```python\n"
                  "import sys\nprint(sum(map(int, sys.stdin.read().split()[1:])))\n```\n")
    assert "print(sum(" in extract_code(completion), f"extracted {extract_code(completion)!r}"
    assert code_tests(completion, {"tests": [{"input": "3\n1 2 3\n", "output": "6"}]}, wall_s=4.0, test_s=1.0) == 1.0


@pytest.mark.xfail(strict=True, reason="documented (docs/rewards.md): without an entry_point the program is the "
                   "last fenced code block, so a usage example after the solution is what runs")
def test_a_usage_example_after_the_solution_is_not_the_program():
    completion = ("```python\ndef add(a, b):\n    return a + b\n```\nExample usage:\n```python\nprint(add(1, 2))  # "
                  "3\n```\n")
    assert code_tests(completion, {"tests": ["assert add(1, 2) == 3"]}, wall_s=4.0, test_s=1.0) == 1.0


def test_with_an_entry_point_the_block_that_defines_it_is_the_program():
    completion = ("```python\ndef add(a, b):\n    return a + b\n```\nExample usage:\n```python\nprint(add(1, 2))  # "
                  "3\n```\n")
    sample = {"tests": ["assert add(1, 2) == 3"], "entry_point": "add"}
    assert code_tests(completion, sample, wall_s=4.0, test_s=1.0) == 1.0


# ================================================================ E. honest programs, statement tests

def test_honest_future_import_with_setup():
    """The runner executes setup + "\\n" + program as one module, so a program starting with
    `from __future__ import annotations` (common in typed code) is a SyntaxError whenever the
    task has a setup, e.g. every HumanEval task (setup = the prompt)."""
    program = "from __future__ import annotations\nfrom typing import List\n\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n"
    prompt = 'from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    """Sum of xs."""\n'
    result = run(program, ["assert total([1, 2]) == 3"], setup=prompt, entry_point="total")
    assert result.passed == 1, result.errors


def test_honest_big_ints():
    """encode() writes ints in decimal: past 4300 digits repr() raises, so 2**20000 cannot be
    returned nor passed by a test (factorial(2000), big Fibonacci numbers)."""
    result = run("def f(n):\n    return 2 ** n\ndef g(x):\n    return x.bit_length()\n",
                 ["assert f(20000) == 2 ** 20000", "assert g(2 ** 20000) == 20001"])
    assert result.passed == 2, result.errors


BIG_DATA = {
    "argument_over_1_MiB": ("def f(xs):\n    return len(xs)\n", "assert f(list(range(200000))) == 200000"),
    "result_over_2_MiB": ("def f(n):\n    return list(range(n))\n", "assert len(f(300000)) == 300000"),
    "module_level_table": ("MOD = 10 ** 9 + 7\nfact = [1] * 200001\nfor i in range(1, 200001):\n"
                           "    fact[i] = fact[i - 1] * i % MOD\ndef f(n):\n    return fact[n]\n", "assert f(10) == "
                                   "3628800"),
}


@pytest.mark.parametrize("name", sorted(BIG_DATA))
def test_honest_big_data(name):
    """Undocumented size limits: a request's literal over 1 MiB is refused by the runner's
    decoder, a reply over 2 MiB by the harness, and the ready message carries EVERY plain-data
    global, so a precomputed table at module level (factorials mod p, a sieve) fails every test."""
    program, test = BIG_DATA[name]
    result = run(program, [test], test_s=3.0)
    assert result.passed == 1, f"an honest program fails ({name}): {result.errors}"


RETURNS = {
    "map": ("def f(xs):\n    return map(abs, xs)\n", "assert list(f([-1, 2])) == [1, 2]"),
    "zip": ("def f(a, b):\n    return zip(a, b)\n", "assert list(f([1], [2])) == [(1, 2)]"),
    "dict_keys": ("def f(d):\n    return d.keys()\n", "assert sorted(f({'b': 1, 'a': 2})) == ['a', 'b']"),
    "reversed": ("def f(xs):\n    return reversed(xs)\n", "assert list(f([1, 2])) == [2, 1]"),
    "Fraction": ("from fractions import Fraction\ndef f():\n    return Fraction(1, 3)\n",
                 "from fractions import Fraction\nassert f() == Fraction(1, 3)"),
    "Decimal": ("from decimal import Decimal\ndef f():\n    return Decimal('1.5')\n", "assert f() == 1.5"),
}


@pytest.mark.parametrize("name", sorted(RETURNS))
def test_honest_iterators_and_numbers(name):
    """Generators become lists, other iterators (map, zip, reversed, dict views) and the
    stdlib's exact numbers (Fraction, Decimal) fail as 'not plain data'."""
    program, test = RETURNS[name]
    result = run(program, [test])
    assert result.passed == 1, f"an honest program returning a {name} fails: {result.errors}"


def test_honest_debug_prints_in_statement_mode():
    """stdout and stderr of a served program count against output_kb (documented only for
    stdin/stdout tests' stdout): debug prints past it fail every later test."""
    program = "def f(x):\n    print('step', x, '.' * 100000)\n    return x\n"
    result = run(program, [f"assert f({i}) == {i}" for i in range(4)])
    assert result.passed == 4, result.errors


def test_honest_numpy_does_not_start_a_thread_per_host_cpu():
    """numpy's OpenBLAS starts one thread per visible CPU (the sandbox sees all of the host's),
    each costing tens of MiB of address space. Measured with a sysconf/affinity shim under the
    runner's limits (RLIMIT_AS 1 GiB, 64 threads): 16 CPUs import fine, 24 CPUs fail with
    MemoryError, 32+ with 'OpenBLAS error: Memory allocation still failed'; so on a typical
    training host `import numpy` fails in every sandbox at the default memory_mb. Here: the
    thread count must not follow the CPU count."""
    pytest.importorskip("numpy")
    program = dedent('''
        import os
        import numpy as np
        x = float((np.ones((300, 300)) @ np.ones((300, 300))).sum())
        def threads():
            return len(os.listdir("/proc/self/task")), len(os.sched_getaffinity(0)), x
    ''')
    result = run(program, ["t, cpus, x = threads()\nassert x == 27000000.0\n"
                           "assert t == 1 or cpus == 1, '%d threads for %d CPUs' % (t, cpus)"], test_s=3.0)
    assert result.passed == 1, f"numpy scales with the host: {result.errors}"


@pytest.mark.xfail(strict=True, reason="documented (docs/rewards.md): setup holds 'the imports the tests need'; "
                   "modules the program imports are not shown to the tests")
def test_a_module_the_program_imported_is_visible_to_tests():
    assert run("import math\ndef area(r):\n    return math.pi * r * r\n",
               ["assert math.isclose(area(2), 12.566, rel_tol=1e-3)"]).passed == 1


def test_control_honest_statement_programs():
    program = dedent('''
        import functools, collections, sys
        sys.setrecursionlimit(100000)
        calls = collections.Counter()
        class Node:
            def __init__(self, v, nxt=None):
                self.v, self.nxt = v, nxt
        def linked_sum(xs):
            head = None
            for x in reversed(xs):
                head = Node(x, head)
            s = 0
            while head:
                s, head = s + head.v, head.nxt
            return s
        @functools.lru_cache(maxsize=None)
        def fib(n):
            calls["fib"] += 1
            return n if n < 2 else fib(n - 1) + fib(n - 2)
        def count_calls():
            return calls["fib"]
        def depth(n):
            return 0 if n == 0 else 1 + depth(n - 1)
        def evens(n):
            for i in range(n):
                if i % 2 == 0:
                    yield i
        def stats(xs):
            return {"min": min(xs), "mean": sum(xs) / len(xs), "uniq": set(xs), "pair": (xs[0], xs[-1]), "none": None, "ok": True}
        def parse(s, *, strict=False):
            if strict and not s.isdigit():
                raise ValueError("not a number: " + s)
            return int(s) if s.isdigit() else None
        def nested():
            return [[1, [2, (3, {"k": frozenset({4})})]], {(1, 2): [None, True, 1.5]}]
        if __name__ == "__main__":
            raise SystemExit("a __main__ block must not run for statement tests")
    ''')
    tests = ["assert linked_sum([1, 2, 3]) == 6", "assert fib(200) == 280571172992510140037611932413038677189525",
             "assert count_calls() == 201", "assert depth(30000) == 30000", "assert list(evens(7)) == [0, 2, 4, 6]",
             "assert stats([3, 1, 3]) == {'min': 1, 'mean': 7 / 3, 'uniq': {1, 3}, 'pair': (3, 3), 'none': None, 'ok': "
             "True}",
             "assert parse('12') == 12 and parse('x') is None",
             "try:\n    parse('x', strict=True)\nexcept ValueError as e:\n    assert 'not a number' in str(e)\nelse:\n "
             "   raise AssertionError('no ValueError')",
             "assert nested() == [[1, [2, (3, {'k': frozenset({4})})]], {(1, 2): [None, True, 1.5]}]",
             "assert fib(300) > fib(299) and count_calls() == 301"]
    result = run(program, tests, test_s=2.0)
    assert result.passed == len(tests), result.errors


def test_control_numpy_statement_and_io():
    pytest.importorskip("numpy")
    program = "import numpy as np\ndef f(xs):\n    return np.array(xs) * 2\ndef g(xs):\n    return np.linalg.solve(np.eye(2), np.array(xs, dtype=float))\n"
    assert run(program, ["assert f([1, 2]) == [2, 4]", "assert list(g([1, 2])) == [1.0, 2.0]"], test_s=3.0).passed == 2
    io = "import sys\nimport numpy as np\nprint(np.array(sys.stdin.read().split(), dtype=np.int64).sum())\n"
    assert run(io, [{"input": "1 2 3", "output": "6"}], test_s=3.0).passed == 1


# ================================================================ F. honest programs, stdin/stdout tests

IO_SUM = [{"input": "3\n1 2 3\n", "output": "6"}, {"input": "2\n10 -4\n", "output": "6\n"}]
IO_HONEST_FAILING = {
    # PyRival / Codeforces fast input: reads fstat(0).st_size bytes, which a pipe reports as 0
    "fstat_sized_read": "import io, os\ninput = io.BytesIO(os.read(0, os.fstat(0).st_size)).readline\n"
                        "n = int(input())\nprint(sum(map(int, input().split())))\n",
    # /dev/stdin and /dev/stdout reopen the harness's pipes, which belong to root with mode 0600
    "dev_stdin": "import sys\nsys.stdin = open('/dev/stdin')\nn = int(input())\nprint(sum(map(int, input().split())))\n",
    "dev_stdout": "n = int(input())\nopen('/dev/stdout', 'w').write(str(sum(map(int, input().split()))) + '\\n')\n",
    # debug output on stderr counts against output_kb (documented for stdout only)
    "stderr_debug": "import sys\nn = int(input())\nfor i in range(3000):\n    print('debug', i, '.' * 100, "
                    "file=sys.stderr)\n"
                    "print(sum(map(int, input().split())))\n",
}


@pytest.mark.parametrize("name", sorted(IO_HONEST_FAILING))
def test_honest_io_idioms(name):
    result = run(IO_HONEST_FAILING[name], IO_SUM)
    assert result.passed == 2, f"an honest stdin/stdout program ({name}) fails: {result.errors}"


def test_control_honest_io_programs():
    programs = {
        "thread_stack_recursion": "import sys, threading\nsys.setrecursionlimit(10 ** 6)\nthreading.stack_size(1 << "
                                  "26)\n"
                                  "def d(n):\n    return 0 if n == 0 else 1 + d(n - 1)\n"
                                  "def main():\n    n = int(input())\n    print(d(50000) - 50000 + sum(map(int, "
                                  "input().split())))\n"
                                  "t = threading.Thread(target=main)\nt.start()\nt.join()\n",
        "stdin_buffer": "import sys\ndata = sys.stdin.buffer.read().split()\nsys.stdout.write(str(sum(map(int, "
                        "data[1:]))))\n",
        "open_0": "data = open(0).read().split()\nprint(sum(map(int, data[1:])), end='')\n",
        "readline_alias": "import sys\ninput = sys.stdin.readline\nn = int(input())\nprint(sum(map(int, "
                          "input().split())))\n",
        "main_guard_and_exit": "import sys\ndef main():\n    data = sys.stdin.read().split()\n    print(sum(map(int, "
                               "data[1:])))\n"
                               "if __name__ == '__main__':\n    main()\n    sys.exit(0)\n",
        "os_write": "import os, sys\ndata = sys.stdin.read().split()\nos.write(1, (str(sum(map(int, data[1:]))) + "
                    "'\\n').encode())\n",
    }
    for name, program in programs.items():
        result = run(program, IO_SUM, test_s=2.0)
        assert result.passed == 2, f"honest {name} fails: {result.errors}"


def test_control_io_edges():
    # reads one line of a 4 MiB input and exits: the harness's pending write must not fail it
    first = run("import sys\nprint(sys.stdin.readline().strip())\n", [{"input": "first\n" + "x" * (4 << 20),
                                                                       "output": "first"}])
    assert first.passed == 1, first.errors
    # output of exactly output_kb passes, one byte more fails
    exact = "import sys\nsys.stdout.write('a' * (int(input()) - 1) + '\\n')\n"
    limit = FAST.output_kb << 10
    result = run(exact, [{"input": str(limit), "output": "a" * (limit - 1)}, {"input": str(limit + 1),
                                                                              "output": "a" * limit}])
    assert result.passed == 1 and 1 in result.errors, result.errors
    # unicode in and out
    uni = run("import sys\nsys.stdout.write(sys.stdin.read().upper()[::-1])\n",
              [{"input": "héllo ✓ 日本", "output": "本日 ✓ OLLÉH"}])
    assert uni.passed == 1, uni.errors


def test_io_program_that_closes_stdout_and_keeps_running_times_out():
    program = "import os, time\nprint(6, flush=True)\nos.close(1)\nos.close(2)\ntime.sleep(30)\n"
    start = time.monotonic()
    result = run(program, [{"input": "", "output": "6"}], test_s=0.5, wall_s=3.0)
    assert result.passed == 0 and time.monotonic() - start < 5, result.errors


def test_io_program_that_never_reads_a_large_input_times_out_without_deadlock():
    program = "import time\ntime.sleep(30)\n"
    start = time.monotonic()
    result = run(program, [{"input": "y" * (8 << 20), "output": ""}], test_s=0.5, wall_s=3.0)
    assert result.passed == 0 and time.monotonic() - start < 5, result.errors
