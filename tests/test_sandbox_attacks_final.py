"""Final red-team pass on the code sandbox, after the switch to tagged JSON, the private
report channel, stdin memfds, per-sandbox uids, CPU pinning and the /tmp inode remount.

Attacks assert that the attack fails and the host is untouched; honest controls assert that
a correct program passes. Real findings are left FAILING (no xfail).

Sections: A. the judge's decoding (tags, deadlines, memory), B. forged frames and the
`broken` flag, C. fds, device nodes and the host, D. extract_code, E. honest programs.
Every attack runs at a small, safe scale (wall_s <= 5).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from textwrap import dedent

import pytest

from aha.rewards.code import SandboxError, SandboxLimits, code_tests, extract_code, run_python, sandbox_support

MISSING = sandbox_support()
sandboxed = pytest.mark.skipif(bool(MISSING), reason=f"no full sandbox on this machine: {MISSING}")

MARK = f"ahapwn3{secrets.token_hex(4)}"
FAST = SandboxLimits(wall_s=5.0, test_s=1.0, cpu_s=4, memory_mb=512, output_kb=256)
SANDBOX_UID_BASE = 1_500_000_000
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
# serve mode: the runner module (to swap what it sends) and its reply channel
RUNNER = "import os, sys, json, time\nrunner = sys.modules['__main__']\nfd = int(sys.argv[2])\n"


def run(code: str, tests: list, setup: str = "", entry_point=None, **limits):
    """run_python under FAST limits; an exception out of it is itself a finding: the docs
    promise it never raises for anything the program does."""
    try:
        return run_python(code, tests, setup, dataclasses.replace(FAST, **limits), entry_point=entry_point)
    except SandboxError as err:
        raise AssertionError(f"run_python raised for a program's behaviour: {str(err)[-600:]}") from err


def _device_state() -> dict:
    state = {}
    for path in DEVICES:
        try:
            st = os.stat(path)
            state[path] = (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), st.st_rdev)
        except OSError:
            pass
    return state


def _sandbox_leftovers() -> list[str]:
    """Processes, SysV IPC objects and /tmp entries owned by a sandbox uid, or named with MARK."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        state = next(line for line in status.splitlines() if line.startswith("State:")).split()[1]
        if state != "Z" and (uid >= SANDBOX_UID_BASE or comm.startswith(MARK[:15])):
            found.append(f"process {entry.name} {comm} uid {uid}")
    for kind in ("shm", "msg", "sem"):
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        except OSError:
            continue
        header = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[0].split()
        for line in lines:
            row = dict(zip(header, line.split()))
            if int(row.get("uid", 0)) >= SANDBOX_UID_BASE or int(row.get("cuid", 0)) >= SANDBOX_UID_BASE:
                found.append(f"SysV {kind} {row.get('key')} uid {row.get('uid')}")
    for root in ("/tmp", "/var/tmp", "/dev/shm"):
        try:
            entries = list(os.scandir(root))
        except OSError:
            continue
        for entry in entries:
            try:
                uid = entry.stat(follow_symlinks=False).st_uid
            except OSError:
                continue
            if uid >= SANDBOX_UID_BASE or MARK in entry.name:
                found.append(f"file {entry.path} uid {uid}")
    return found


@pytest.fixture(autouse=True)
def host_untouched():
    """Around every test: host device nodes keep owner and mode; nothing of a sandbox is left."""
    devices = _device_state()
    yield
    problems = []
    now = _device_state()
    for path, before in devices.items():
        if now.get(path) != before:
            problems.append(f"{path} changed from {before} to {now.get(path)}")
            uid, gid, mode, _ = before
            os.chown(path, uid, gid)  # restore at once
            os.chmod(path, mode)
    deadline = time.monotonic() + 1.5
    while _sandbox_leftovers() and time.monotonic() < deadline:
        time.sleep(0.05)
    for what in _sandbox_leftovers():
        problems.append(what)
        if what.startswith("process "):
            try:
                os.kill(int(what.split()[1]), signal.SIGKILL)
            except OSError:
                pass
    assert not problems, "HOST DAMAGE: " + "; ".join(problems)


# ================================================================ A. the judge's decoding

# A.1 The reply is decoded in the harness under the test's SIGALRM deadline, but a signal
# handler runs only between bytecodes: one C call that takes seconds is not interrupted.
# Fraction(n, d) runs math.gcd (Lehmer, quadratic) on the two ints, and {"i": hex} accepts
# up to 2**20 hex digits (4 Mbit): gcd of two such ints takes ~23 s here (0.9 s at 0.8 Mbit).
# So a 1 MiB reply holds the harness past test_s, on a core that is neither the sandbox's
# pinned one nor counted by cpu_s, until wall_s kills everything; the tests after it are lost.
GCD_BOMB = '{"q": [{"i": "f%s1"}, {"i": "e%s3"}]}' % (secrets.token_hex((1 << 19) - 2),
                                                      secrets.token_hex((1 << 19) - 2))


def test_a_reply_whose_decoding_is_one_long_c_call_keeps_the_tests_deadline():
    program = RUNNER + dedent(f'''
        BOMB = {GCD_BOMB!r}
        def f(x):
            if x == 2:
                os.write(fd, ('{{"value": ' + BOMB + '}}\\n').encode())
                time.sleep(30)
            return x
    ''')
    start = time.monotonic()
    result = run(program, ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"], test_s=0.5, wall_s=5.0)
    took = time.monotonic() - start
    assert result.passed >= 1 and 1 in result.errors, result.errors  # the earlier pass is kept either way
    assert not result.timed_out and result.passed == 2, (
        f"FINDING: one 2 MiB Fraction reply held the harness {took:.1f} s (test_s=0.5) until wall_s killed it: "
        f"test 2 {result.errors.get(2)!r}; the harness burned an unpinned core outside cpu_s the whole time")


def test_a_ready_message_whose_decoding_is_one_long_c_call_keeps_the_tests_deadline():
    """Same C call in the start-up message: Program.start decodes the program's plain-data
    globals before the test's itimer is even set, and only wall_s stops it. The program is
    honest when run as __main__ (stdin/stdout tests) and sends the bomb when served."""
    program = dedent(f'''
        import os, sys, time
        BOMB = {GCD_BOMB!r}
        if __name__ == "__main__":
            print(int(input()) * 2)
        else:
            os.write(int(sys.argv[2]), ('{{"ready": true, "names": {{"x": {{"value": ' + BOMB + '}}}}}}\\n').encode())
            time.sleep(30)
    ''')
    result = run(program, [{"input": "2", "output": "4"}, "assert x == 1", {"input": "3", "output": "6"}],
                 test_s=0.5, wall_s=5.0)
    assert result.passed >= 1 and 0 not in result.errors, result.errors
    assert not result.timed_out and result.passed == 2, (
        "FINDING: a Fraction global in the ready message held the harness until wall_s: test 2 "
        f"{result.errors.get(2)!r}")


# A.2 Memory: a reply is capped at 16 MiB of JSON, but the harness holds the parsed JSON and
# the decoded value at once, ~50x the frame for small tagged items ({"s": []} is 9 bytes,
# a dict + list + set ~450 bytes). memory_mb bounds only the sandbox.
def test_the_judges_memory_for_one_reply_is_bounded():
    n = 150_000
    probe = dedent(f'''
        import resource, sys
        from aha.rewards.code import run_python, SandboxLimits
        program = "def f():\\n    return [set() for _ in range({n})]\\n"
        run_python(program, ["assert f() == 0"], limits=SandboxLimits(wall_s=5, test_s=3, memory_mb=256))
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    ''')
    base_probe = "import resource\nfrom aha.rewards.code import run_python\nrun_python('def f():\\n    return 0\\n', ['assert f() == 0'])\n" \
                 "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    base = int(subprocess.run([sys.executable, "-c", base_probe], capture_output=True, text=True, env=env,
                              timeout=20).stdout.split()[-1]) << 10
    peak = int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                              timeout=20).stdout.split()[0]) << 10
    frame = 9 * n
    per_byte = max(0, peak - base) / frame
    at_cap = per_byte * min(16 << 20, (256 << 20) // 64)  # the reply cap is memory_mb / 64 (at most 16 MiB)
    assert at_cap <= (256 << 20), (
        f"FINDING: the harness grew {(peak - base) >> 20} MiB for a {frame >> 10} KiB reply ({per_byte:.0f}x): "
        f"~{at_cap / 2**30:.2f} GiB per sandbox at the 16 MiB frame cap, with memory_mb=256 "
        "(outside every documented limit; the docs' 'not bounded' list names only page cache and pipes)")


# ================================================================ B. forged frames and `broken`

FRAMES = [
    {"value": {"q": [3, 0]}}, {"value": {"q": [True, 1]}}, {"value": {"q": [3.0, 1]}},
    {"value": {"D": "sNaN"}}, {"value": {"s": [{"D": "sNaN"}]}}, {"value": {"D": "1e999999999999999999999999"}},
    {"value": {"D": "3" * 10_000}}, {"value": {"D": "NaN" + "9" * 5000}}, {"value": {"D": 3}},
    {"value": {"i": "xyz"}}, {"value": {"i": "f" * (1 << 20)}}, {"value": {"i": 3}},
    {"value": {"b": "zz"}}, {"value": {"b": "abc"}}, {"value": {"f": "NaN"}}, {"value": {"f": "3"}},
    {"value": {"c": [1e308, {"i": "f" * 3000}]}}, {"value": {"c": [True, 0]}}, {"value": {"c": [3]}},
    {"value": {"t": 3}}, {"value": {"t": [3], "s": [3]}}, {"value": {"s": [[3]]}}, {"value": {"d": [[[1], 3]]}},
    {"value": {"d": [[3]]}}, {"value": {"d": [3]}}, {"value": {"fs": [{"d": []}]}}, {"value": {}},
    {"value": {"3": 3}}, {"value": {"t": [{"t": []}]}},
    {"raised": ["TestTimeout", "CandidateError", "SetupFailure", "SystemExit", "KeyboardInterrupt", "GeneratorExit"],
     "message": "x"},
    {"raised": [], "message": {"t": [1]}}, {"raised": "AssertionError"}, {"unsendable": None}, {"ready": True},
    {"confined": True, "missing": []}, {"fatal": "forged"}, {"test": 0, "ok": True},
]
# a value nested past MAX_DEPTH, built here so the literal stays short
_deep: object = 3
for _ in range(150):
    _deep = {"t": [_deep]}
FRAMES.append({"value": _deep})


@sandboxed
def test_forged_tagged_frames_score_nothing_and_break_nothing():
    """The function swaps the runner's _send for one message, so each forged frame is the
    reply to exactly one call and the sandbox stays in step (no restarts)."""
    program = RUNNER + f"FRAMES = {json.dumps([json.dumps(f) for f in FRAMES])}\n" + dedent('''
        _send = runner._send
        def _once(frame):
            def send(out, message):
                runner._send = _send
                out.write(frame + "\\n")
                out.flush()
            return send
        def f(i):
            runner._send = _once(FRAMES[i])
            return 0
    ''')
    tests = [f"assert f({i}) == 3" for i in range(len(FRAMES))]
    start = time.monotonic()
    result = run(program, tests, test_s=1.0, wall_s=10.0)
    hacks = [FRAMES[i] for i in range(len(FRAMES)) if i not in result.errors]
    assert not hacks, f"HACK: forged frames passed: {str(hacks)[:400]}"
    assert not result.timed_out and time.monotonic() - start < 8, f"the harness was slow on a frame: {result.errors}"


# B.2 a failure the harness attributes to the program (not plain data, a reply too big, the
# sandbox gone) must fail a test that expects an exception with a bare except
RAISES = "try:\n    f(-1)\nexcept:\n    pass\nelse:\n    raise AssertionError('no exception')"
BROKEN = {
    "returns_an_object": "def f(x):\n    return object()\n",
    "returns_a_forged_tag": RUNNER + "def f(x):\n    runner.to_data = lambda v: {'zz': 1}\n    return 1\n",
    "reply_past_the_frame_cap": RUNNER + "def f(x):\n    return 'x' * (17 << 20)\n",
    "ready_then_exits_mid_reply": RUNNER + "def f(x):\n    os.write(fd, b'{\"value\": ')\n    os._exit(0)\n",
}


@sandboxed
@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_reply_swallowed_by_the_test_does_not_pass(name):
    result = run(BROKEN[name], [RAISES, "assert 1 == 1"], test_s=1.0, memory_mb=768)
    assert 0 in result.errors, f"HACK {name}: a 'must raise' test passed without the function raising"
    assert 1 not in result.errors, result.errors


def test_control_raising_passes():
    result = run("def f(x):\n    raise KeyError(x)\n", [RAISES])
    assert result.passed == 1, result.errors


# ================================================================ C. fds, device nodes, the host

FD_PROBE = dedent(r'''
    import os, stat
    def fds():
        bad, seen = [], []
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                st = os.fstat(fd)
                link = os.readlink("/proc/self/fd/%d" % fd)
            except OSError:
                continue  # the listdir's own fd
            seen.append(fd)
            if not (stat.S_ISFIFO(st.st_mode) or link.startswith("/memfd:")):
                bad.append((fd, link, oct(st.st_mode)))
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                bad.append(("device", fd, link))
        for p in ("/proc/1/fd", "/proc/1/root/etc", "/proc/1/environ"):
            try:
                os.listdir(p) if not p.endswith("environ") else open(p).read()
                bad.append("reached " + p)
            except OSError:
                pass
        return sorted(seen), bad
    if __name__ == "__main__":
        print(fds())
''')


@sandboxed
def test_no_host_file_or_device_reaches_the_sandbox_as_an_fd():
    """Statement mode: 0 = memfd, 1/2 = the stderr pipe, plus the request/reply pipes; the
    harness's report channel (a dup of its stdout) and the job pipe never get in. Mixed with
    a stdin/stdout test, so a live served sandbox's pipes exist when the second one starts."""
    result = run(FD_PROBE, ["seen, bad = fds()\nassert not bad and len(seen) <= 5, (seen, bad)",
                            {"input": "", "output": "([0, 1, 2], [])"},
                            "seen, bad = fds()\nassert not bad, bad"])
    assert result.passed == 3, f"ESCAPE: {result.errors}"


DEVICE_ATTACK = dedent(r'''
    import os, stat
    def attack():
        got = []
        for path in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"):
            for what, op in (("chmod", lambda p: os.chmod(p, 0o777)), ("chown", lambda p: os.chown(p, os.getuid(), os.getgid())),
                             ("utime", lambda p: os.utime(p, (0, 0)))):
                try:
                    op(path)
                    got.append(what + " " + path)
                except OSError:
                    pass
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            for what, op in (("fchmod", lambda: os.fchmod(fd, 0o777)), ("fchown", lambda: os.fchown(fd, os.getuid(), -1))):
                try:
                    op()
                    got.append(what + " " + path)
                except OSError:
                    pass
            os.close(fd)
        for fd in (0, 1, 2):  # its own fds: changing them is fine, as long as they are not host files
            try:
                os.fchmod(fd, 0o666)
            except OSError:
                pass
        for path in ("/proc/self/fd/0", "/dev/stdin", "/dev/stdout"):
            try:
                os.chmod(path, 0o777)
            except OSError:
                pass
        return got
''')


@sandboxed
def test_device_nodes_cannot_be_chmodded_or_chowned():
    result = run(DEVICE_ATTACK, ["r = attack()\nassert r == [], r", {"input": "", "output": ""}])
    assert 0 not in result.errors, f"HOST DAMAGE: {result.errors[0]}"


@sandboxed
def test_hard_links_and_symlinks_count_against_the_tmp_inode_limit():
    """nr_inodes=10,000 on /tmp: links (one dentry each, kernel memory) must hit it too."""
    program = dedent('''
        import os
        made, err = 0, None
        os.close(os.open("/tmp/f", os.O_CREAT | os.O_WRONLY))
        try:
            for i in range(15000):
                (os.link if i % 2 else os.symlink)("/tmp/f", "/tmp/l%06d%s" % (i, "x" * 200))
                made += 1
        except OSError as e:
            err = repr(e)
        def report():
            s = os.statvfs("/tmp")
            return made, s.f_files, err
    ''')
    result = run(program, ["r = report()\nassert r[0] <= 10000 and r[1] <= 10000, r"], disk_mb=1, test_s=3.0)
    assert result.passed == 1, f"ESCAPE: {result.errors}"


@sandboxed
def test_tmp_cannot_be_remounted_or_unmounted_by_the_program():
    program = dedent('''
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        def attack():
            r1 = libc.mount(b"tmpfs", b"/tmp", b"tmpfs", ctypes.c_ulong(32), b"size=1g,nr_inodes=0")
            r2 = libc.umount2(b"/tmp", 2)
            r3 = libc.mount(b"none", b"/tmp", b"tmpfs", 0, b"size=1g")
            s = os.statvfs("/tmp")
            return r1, r2, r3, s.f_files, s.f_blocks * s.f_frsize
    ''')
    result = run(program, ["r = attack()\nassert r[:3] == (-1, -1, -1) and r[3] <= 10000 and r[4] <= (2 << 20), r"],
                 disk_mb=2)
    assert result.passed == 1, f"ESCAPE: {result.errors}"


@sandboxed
def test_a_debug_flood_during_calls_neither_slows_nor_loses_results():
    """A thread floods stderr while calls are answered: every test still passes and the run
    stays short; with a hang at the end, the earlier passes survive the wall clock."""
    program = dedent('''
        import sys, threading, time
        def flood():
            while True:
                sys.stderr.write("y" * 65536)
        threading.Thread(target=flood, daemon=True).start()
        def f(x):
            if x < 0:
                while True:
                    pass
            print("z" * 100000)
            return x + 1
    ''')
    tests = [f"assert f({i}) == {i + 1}" for i in range(8)] + ["f(-1)"]
    start = time.monotonic()
    result = run(program, tests, test_s=1.0, wall_s=5.0)
    assert result.passed == 8 and set(result.errors) == {8}, result.errors
    assert time.monotonic() - start < 5.0, "the flood held the harness"


# ================================================================ D. extract_code

ADD = "def add(a, b):\n    return a + b\n"
EXTRACT_HONEST = {
    # a numbered step with its code indented under it (CommonMark list item)
    "fence_in_a_list_item": "1. Define it:\n   ```python\n   def add(a, b):\n       return a + b\n   ```\n2. Done.\n",
    # the opening fence at the end of a prose line: the old regex found it; now the closing
    # fence opens a bare block and the prose after it is the program
    "opening_fence_after_prose": "Here you go: ```python\ndef add(a, b):\n    return a + b\n```\nThis adds two numbers.",
    "four_backtick_fence": "````python\ndef add(a, b):\n    return a + b\n````\n",
}


@pytest.mark.parametrize("name", sorted(EXTRACT_HONEST))
def test_honest_fence_layouts_extract_the_program(name):
    code = extract_code(EXTRACT_HONEST[name], "add")
    compiled = True
    try:
        compile(code, "x", "exec")
    except SyntaxError:
        compiled = False
    assert compiled and "return a + b" in code, f"HONEST FAILURE: extracted {code!r}"


def test_prose_and_a_later_test_block_do_not_become_the_program_with_an_entry_point():
    completion = ("```python\n" + ADD + "```\nCheck:\n```python\nassert add(1, 2) == 3\nprint('ok')\n```\n"
                  "```text\nok\n```\nThat's it ``` done\n")
    assert extract_code(completion, "add") == ADD


# ================================================================ E. honest programs

ECHO_VALUES = [
    "float('nan')", "-0.0", "float('-inf')", "5e-324", "1.7976931348623157e308", "2 ** 9999", "-(2 ** 10000)",
    "2 ** 100000 + 1", "bytes(range(256))", "'\\ud800\\x00\\n\"\\\\'", "Decimal('sNaN')", "Decimal('-0')",
    "Decimal('1E+999999999')", "Decimal('NaN123')", "Decimal('-Infinity')", "Decimal('0.1000')", "Fraction(-1, 3)",
    "Fraction(2 ** 200, 3 ** 100)", "complex(float('inf'), -0.0)", "{1: 'a', '1': 'b', (1,): 'c', frozenset(): 'd', "
            "None: 'e', b'': 'f', 1.5: 'g'}",
    "{(1, 2), (3, (4,))}", "((((),),),)", "[[], {}, set(), frozenset(), (), '', b'']", "True", "None",
]
ECHO_SETUP = dedent('''
    from decimal import Decimal
    from fractions import Fraction
    def same(a, b):
        if type(a) is not type(b):
            return False
        if type(a) is int:
            return a == b
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        return repr(a) == repr(b)
''')


@sandboxed
def test_honest_values_round_trip_both_ways():
    tests = [f"v = {v}\nr = echo(v)\nassert same(r, v), (type(r), type(v))" for v in ECHO_VALUES]
    result = run("def echo(x):\n    return x\n", tests, setup=ECHO_SETUP)
    assert result.passed == len(tests), {ECHO_VALUES[i]: e for i, e in result.errors.items()}


@sandboxed
def test_honest_long_decimal_round_trips():
    """The codec caps a Decimal's text at 10,000 characters (both ways): a program that
    computes with getcontext().prec = 12000 cannot return its result."""
    program = "from decimal import Decimal, getcontext\ngetcontext().prec = 12000\ndef root2():\n    return Decimal(2).sqrt()\n"
    result = run(program, ["from decimal import Decimal, getcontext\ngetcontext().prec = 12000\nassert root2() == "
                           "Decimal(2).sqrt()"])
    assert result.passed == 1, f"HONEST FAILURE: {result.errors}"


@sandboxed
def test_honest_program_with_a_big_top_level_table():
    """A precomputed table at top level (`dp = [0] * N`, a sieve) is common. names_of converts
    every global with to_data and json.dumps before it checks the 64 KiB cap, so a 4 M-entry
    list costs ~1.5 s of start-up before the program is 'ready', and with test_s=1 every test
    times out (test_s=2 fails at ~6 M entries)."""
    program = "N = 4_000_000\ndp = [0] * N\nfor i in range(1, 50):\n    dp[i] = dp[i - 1] + i\ndef tri(n):\n    return dp[n]\n"
    result = run(program, ["assert tri(3) == 6", "assert tri(10) == 55"], test_s=1.0, memory_mb=768)
    assert result.passed == 2, f"HONEST FAILURE: {result.errors}"


@sandboxed
def test_honest_humaneval_layout_and_exceptions():
    setup = 'from typing import List\n\ndef below_zero(operations: List[int]) -> bool:\n    """doc"""\n'
    program = ("from typing import List\n\ndef below_zero(operations: List[int]) -> bool:\n    balance = 0\n"
               "    for op in operations:\n        balance += op\n        if balance < 0:\n            return True\n"
               "    if not operations:\n        raise ValueError('empty')\n    return False\n")
    test = ("def check(candidate):\n    assert candidate([1, 2, -4]) is True\n    assert candidate([1, 2]) is False\n"
            "    try:\n        candidate([])\n    except ValueError as e:\n        assert str(e) == 'empty'\n"
            "    else:\n        raise AssertionError\ncheck(below_zero)")
    completion = f"Sure:\n```python\n{program}```\nUsage:\n```python\nprint(below_zero([1]))\n```\n"
    sample = {"tests": [test], "setup": setup, "entry_point": "below_zero"}
    assert code_tests(completion, sample, wall_s=5.0, test_s=1.0) == 1.0


@sandboxed
def test_an_io_program_cannot_change_the_next_tests_input_through_its_read_write_stdin():
    """fd 0 is a memfd opened O_RDWR and fchown'ed to the sandbox: writing to it must stay
    within this test's own copy of the input."""
    program = dedent('''
        import os, sys
        data = sys.stdin.read()
        try:
            os.lseek(0, 0, 0); os.write(0, b"999\\n"); os.ftruncate(0, 4)
            with open("/proc/self/fd/0", "w") as f:
                f.write("999\\n")
        except OSError:
            pass
        print(int(data) * 2)
    ''')
    result = run(program, [{"input": "2", "output": "4"}, {"input": "3", "output": "6"},
                           {"input": "5", "output": "10"}])
    assert result.passed == 3, f"HACK/ESCAPE: {result.errors}"


@sandboxed
def test_honest_exception_args_survive():
    """The harness rebuilds the exception from str(err): KeyError's str() adds quotes, so
    e.args[0] is "'k'", not 'k'."""
    program = "def get(d, k):\n    return d[k]\ndef check(x):\n    if x < 0:\n        raise ValueError('negative', x)\n"
    tests = ["try:\n    get({}, 'k')\nexcept KeyError as e:\n    assert e.args[0] == 'k', e.args",
             "try:\n    check(-1)\nexcept ValueError as e:\n    assert e.args == ('negative', -1), e.args"]
    result = run(program, tests)
    assert result.passed == 2, f"HONEST FAILURE: {result.errors}"
