"""The code sandbox: real programs, real tests, and programs that try to break out."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from aha.rewards.code import SandboxError, SandboxLimits, code_tests, extract_code, run_python, sandbox_support

MISSING = sandbox_support()
confined = pytest.mark.skipif(bool(MISSING), reason=f"no full sandbox on this machine: {MISSING}")

ADD = "def add(a, b):\n    return a + b\n"
FAST = SandboxLimits(wall_s=5.0, test_s=1.0)


def test_extracts_the_last_fenced_block():
    completion = "Try:\n```python\nx = 1\n```\nBetter:\n```py\ndef f():\n    return 2\n```\nDone."
    assert extract_code(completion) == "def f():\n    return 2\n"
    assert extract_code("def f(): return 3") == "def f(): return 3"


@confined
def test_partial_credit_by_tests_passed():
    tests = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) == 5"]
    result = run_python(ADD, tests, limits=FAST)
    assert (result.passed, result.total) == (2, 3)
    assert result.errors[2].startswith("AssertionError")
    sample = {"tests": tests}
    assert code_tests(f"Here it is:\n```python\n{ADD}```", sample) == pytest.approx(2 / 3)
    assert code_tests(f"```python\n{ADD}```", sample, partial_credit=False) == 0.0


@confined
def test_stdin_stdout_tests_and_setup_code():
    program = "n = int(input())\nprint(n * 2)\n"
    result = run_python(program, [{"input": "3", "output": "6"}, {"input": "4\n", "output": "8\n\n"},
                                  {"input": "5", "output": "11"}])
    assert result.passed == 2 and "wrong output" in result.errors[2]
    result = run_python("def root(x):\n    return math.sqrt(x)\n", ["assert root(9) == 3"], setup="import math")
    assert result.passed == 1


@confined
def test_threads_still_work_inside():
    program = "import threading\nout = []\nt = threading.Thread(target=lambda: out.append(1))\nt.start(); t.join()\n"
    assert run_python(program, ["assert out == [1]"], limits=FAST).passed == 1


@confined
@pytest.mark.parametrize("name,program", [
    ("tcp", "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\n"),
    ("udp", "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'x', ('8.8.8.8', 53))\n"),
    ("unix", "import socket\nsocket.socket(socket.AF_UNIX).connect('/run/docker.sock')\n"),
    ("raw syscall", "import ctypes\nassert ctypes.CDLL(None).socket(2, 1, 0) >= 0\n"),
])
def test_no_network(name, program):
    result = run_python(program, ["assert True"], limits=FAST)
    assert result.passed == 0, name
    assert "Permission denied" in result.errors[0] or "AssertionError" in result.errors[0], result.errors


@confined
def test_fork_bomb_and_subprocesses_are_refused():
    bomb = "import os\nwhile True:\n    os.fork()\n"
    result = run_python(bomb, ["assert True"], limits=FAST)
    assert result.passed == 0 and "Resource temporarily unavailable" in result.errors[0]
    shell = "import subprocess\nsubprocess.run(['true'])\n"
    assert run_python(shell, ["assert True"], limits=FAST).passed == 0


@confined
def test_writes_outside_the_scratch_folder_fail_and_inside_work():
    with tempfile.TemporaryDirectory() as host:  # a folder the host owns and could write
        target = Path(host) / "pwned.txt"
        for path in (target, Path("/tmp/aha-sandbox-pwned"), Path("/dev/shm/aha-pwned"), Path.cwd() / "pwned.txt",
                     Path("/usr/pwned.txt"), Path(sys.prefix) / "pwned.txt"):
            result = run_python(f"open({str(path)!r}, 'w').write('x')\n", ["assert True"], limits=FAST)
            if path.name == "aha-sandbox-pwned":  # the sandbox's own /tmp, gone with it
                assert result.passed == 1, result.errors
            else:
                assert result.passed == 0 and "failed before the tests" in result.errors[0], (path, result.errors)
            assert not path.exists()
        inside = "open('notes.txt', 'w').write('ok')\nimport os\nos.makedirs('sub/dir')\n" \
                 "def read():\n    return open('notes.txt').read()\n"
        assert run_python(inside, ["assert read() == 'ok'"], limits=FAST).passed == 1


@confined
def test_the_host_is_not_even_visible(tmp_path):
    secret = tmp_path / "hidden_tests.jsonl"  # e.g. the task's expected outputs
    secret.write_text('{"expected": 42}')
    probe = ("import os\ndef seen(path):\n    try:\n        os.stat(path)\n        return True\n"
             "    except OSError:\n        return False\n")
    for path in (secret, tmp_path, "/root/.bashrc", "/root/.cache", "/etc/shadow", "/etc/passwd", "/dev/shm/x", "/home",
                 Path.cwd() / "pyproject.toml"):
        result = run_python(probe, [f"assert not seen({str(path)!r})"], limits=FAST)
        assert result.passed == 1, (path, result.errors)
    # the sandbox's pid 1 is bubblewrap's reaper, root: its environment is not readable either
    reader = "def read(path):\n    return open(path).read()\n"
    result = run_python(reader, ["read('/proc/1/environ')"], limits=FAST)
    assert result.passed == 0 and all("Permission denied" in e for e in result.errors.values()), result.errors
    # the interpreter and its packages stay readable, and a folder the config names
    allowed = "import numpy, json, fractions\ndef total():\n    return int(numpy.arange(10).sum())\n"
    assert run_python(allowed, ["assert total() == 45"], limits=FAST).passed == 1
    limits = SandboxLimits(wall_s=5.0, test_s=1.0, extra_read=(str(tmp_path),))
    with pytest.raises(SandboxError, match="not readable by other users"):
        run_python("", ["pass"], limits=limits)
    tmp_path.chmod(0o755)
    secret.chmod(0o644)
    assert run_python(f"data = open({str(secret)!r}).read()\n", ["assert '42' in data"], limits=limits).passed == 1


@confined
@pytest.mark.skipif(os.geteuid() != 0, reason="an ordinary user's sandbox has uid 65534 and no thread limit of its own")
def test_the_program_runs_unprivileged_with_a_uid_of_its_own():
    program = ("import os, resource\nuid = os.getuid()\n"
               "caps = [l for l in open('/proc/self/status') if l.startswith('Cap')]\n"
               "groups = os.getgroups()\nthreads = resource.getrlimit(resource.RLIMIT_NPROC)\n")
    tests = ["assert uid >= 1_500_000_000", "assert all(l.split()[1] == '0' * 16 for l in caps)",
             "assert groups == []", "assert threads == (64, 64)", "assert uid != other_uid"]
    first = run_python(program + "other_uid = 0\n", tests, limits=FAST)
    assert first.passed == 5, first.errors
    if os.geteuid() == 0:  # two sandboxes alive at once get different uids (each has its own thread limit)
        from concurrent.futures import ThreadPoolExecutor

        probe = "import os, time\ntime.sleep(0.5)\nuid = os.getuid()\n"
        with ThreadPoolExecutor(2) as pool:
            runs = list(pool.map(lambda _: run_python(probe, ["assert uid < 0, uid"], limits=FAST), range(2)))
        uids = {r.errors[0] for r in runs}  # "AssertionError: <uid>"
        assert len(uids) == 2 and all(u.startswith("AssertionError: 15") for u in uids), uids


@confined
@pytest.mark.skipif(os.geteuid() != 0, reason="an ordinary user's sandbox has uid 65534 and no thread limit of its own")
def test_a_thread_bomb_stops_at_the_sandboxs_own_limit():
    bomb = ("import threading, time\nstarted = 0\ntry:\n    for _ in range(1000):\n"
            "        threading.Thread(target=time.sleep, args=(2,), daemon=True).start()\n        started += 1\n"
            "except RuntimeError:\n    pass\n")
    result = run_python(bomb, ["assert started < 64"], limits=FAST)
    assert result.passed == 1, result.errors


@confined
def test_cannot_signal_processes_outside():
    victim = subprocess.Popen(["sleep", "30"])
    try:
        program = f"import os, signal\nos.kill({victim.pid}, signal.SIGKILL)\n"
        result = run_python(program, ["assert True"], limits=FAST)
        assert result.passed == 0 and "No such process" in result.errors[0]  # not even visible
        assert victim.poll() is None  # still alive
    finally:
        victim.kill()
        victim.wait()


@confined
def test_sleep_forever_is_killed_and_earlier_tests_still_count():
    program = ADD + "import time\ndef nap():\n    time.sleep(1000)\n"
    tests = ["assert add(1, 1) == 2", "nap()", "assert add(2, 3) == 5"]
    result = run_python(program, tests, limits=SandboxLimits(wall_s=5.0, test_s=0.5))
    assert result.passed == 2 and "timed out" in result.errors[1]
    # a program that ignores the per-test alarm is killed by the wall clock
    stubborn = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    result = run_python(stubborn, ["assert True"], limits=SandboxLimits(wall_s=4.0, test_s=0.2))
    assert not result.timed_out and result.passed == 0 and "timed out" in result.errors[0]
    # the harness's own wall clock is the last word
    slow = "import time\ndef nap():\n    time.sleep(1000)\n"
    result = run_python(slow, ["nap()"] * 10, limits=SandboxLimits(wall_s=1.5, test_s=1.0))
    assert result.timed_out and result.passed == 0 and len(result.errors) == 10


@confined
def test_memory_and_output_limits():
    hog = run_python("x = bytearray(4 << 30)\n", ["assert True"], limits=SandboxLimits(memory_mb=512))
    assert hog.passed == 0 and "MemoryError" in hog.errors[0]
    flood = run_python("while True:\n    print('x' * 1000, flush=True)\n", ["assert True"],
                       limits=SandboxLimits(output_kb=64, wall_s=5))
    # debug output is drained and only its tail kept: endless printing just runs out of time
    assert flood.passed == 0 and not flood.timed_out and "timed out" in flood.errors[0]
    assert 0 < len(flood.stderr) <= 4000 and flood.stderr.endswith("x\n")
    io_flood = run_python("while True:\n    print('x' * 1000)\n", [{"input": "", "output": "x"}],
                          limits=SandboxLimits(output_kb=64, wall_s=5))
    assert io_flood.passed == 0 and "output limit exceeded" in io_flood.errors[0]
    # Python ignores SIGXFSZ, so a file write past the limit fails instead of killing the run
    big_file = run_python("open('big', 'wb').write(b'x' * (1 << 20))\n", ["assert True"],
                          limits=SandboxLimits(output_kb=64, wall_s=5))
    assert big_file.passed == 0 and "File too large" in big_file.errors[0]
    # and all files together are bounded by the size of the sandbox's /tmp
    fill = ("import os\ni = 0\ntry:\n    while True:\n        open(f'f{i}', 'wb').write(b'x' * (1 << 19))\n"
            "        i += 1\nexcept OSError as err:\n    stop = (i, err.errno)\n")
    result = run_python(fill, ["assert stop[0] < 8 and stop[1] == 28"], limits=SandboxLimits(disk_mb=2, wall_s=5))
    assert result.passed == 1, result.errors  # ENOSPC after 2 MiB


@confined
def test_early_exit_and_forged_reports_do_not_pass():
    assert run_python(ADD + "import os\nos._exit(0)\n", ["assert add(1, 1) == 2"], limits=FAST).passed == 0
    assert run_python(ADD + "raise SystemExit(0)\n", ["assert add(1, 1) == 2"], limits=FAST).passed == 0
    forge = ("import os\nfor fd in range(3, 10):\n    try:\n"
             "        os.write(fd, b'{\"nonce\": \"0\", \"test\": 0, \"ok\": true}\\n')\n"
             "    except OSError:\n        pass\nraise SystemExit(1)\n")
    assert run_python(forge, ["assert False"], limits=FAST).passed == 0


def test_bad_tests_are_a_clear_error():
    with pytest.raises(SandboxError, match="non-empty list"):
        run_python(ADD, [])
    with pytest.raises(SandboxError, match="no 'tests' field"):
        code_tests(ADD, {"id": "p1"})


@confined
def test_scratch_and_outputs_are_removed_afterwards():
    before = set(Path(tempfile.gettempdir()).glob("aha-sandbox-*"))
    program = ("open('big.bin', 'wb').write(b'x' * 100000)\nprint('hello')\n"
               "def first():\n    return open('big.bin', 'rb').read(1)\n")
    assert run_python(program, ["assert first() == b'x'"], limits=FAST).passed == 1
    assert set(Path(tempfile.gettempdir()).glob("aha-sandbox-*")) == before


@confined
def test_code_reward_on_a_worker_pool():
    from aha.config import RewardSpec
    from aha.rewards import build_reward

    spec = RewardSpec(fn="code_tests", workers=2, timeout_s=20, args={"wall_s": 3.0, "test_s": 1.0})
    reward = build_reward([spec])
    sample = {"id": "add", "tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}
    completions = [f"```python\n{ADD}```", "def add(a, b):\n    return 3\n", "import os\nwhile True:\n    os.fork()\n",
                   "def add(a, b):\n    while True:\n        pass\n"]
    try:
        result = reward.score(completions, [sample] * 4)
    finally:
        reward.close()
    assert result.total.tolist() == [1.0, 0.5, 0.0, 0.0]
    assert not result.failed.any()  # a program that fails its tests is a score, not a reward failure


@confined
def test_a_code_task_trains_end_to_end(tmp_path):
    import json

    from aha.config import load_config
    from aha.training.loop import train

    rows = [{"prompt": f"Write add{i}(a, b).", "tests": [f"assert add{i}(1, 2) == 3"]} for i in range(6)]
    (tmp_path / "code.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "code.yaml").write_text(
        f"model: tiny\noutput_dir: {tmp_path / 'run'}\ntask: {{data: code.jsonl, eval_data: code.jsonl}}\n"
        "reward: [{fn: code_tests, workers: 2, timeout_s: 20, args: {wall_s: 3}}]\n"
        "rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 4}\n"
        "train: {steps: 2, checkpoint_every: 0}\nalgorithm: {dynamic_sampling: false}\n"
        "eval: {limit: 2, scorer: code_tests}\n")
    summary = train(load_config(tmp_path / "code.yaml"), echo=lambda *_: None)
    records = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "reward/mean" in r]
    assert len(steps) == 2 and all(r["reward/failed"] == 0 and "reward/code_tests" in r for r in steps)
    assert summary.accuracy_after == 0.0  # a random tiny model writes no working code


def _processes_mentioning(marker: str) -> list[str]:
    found = []
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmdline = status.read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(cmdline)
    return found


@confined
def test_nothing_survives_the_wall_clock():
    program = "import time, threading\nthreading.Thread(target=time.sleep, args=(1000,)).start()\n" \
              "def nap():\n    time.sleep(1000)\n"
    with tempfile.TemporaryDirectory() as marker:  # bound into the sandbox, so bubblewrap's command line names it
        Path(marker).chmod(0o755)
        limits = SandboxLimits(wall_s=1.0, test_s=5.0, extra_read=(marker,))
        result = run_python(program, ["nap()", {"input": "", "output": ""}], limits=limits)
        assert result.timed_out and result.passed == 0
        time.sleep(0.2)
        assert _processes_mentioning(marker) == []


@confined
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser") or not Path("/usr/bin/python3").exists(),
                    reason="needs root (to become nobody), runuser and the system's python3")
def test_an_ordinary_user_gets_the_same_sandbox():
    """Started by an unprivileged user, bubblewrap needs a user namespace; the program is
    still uid 65534 and just as confined. The scripts run on the system's interpreter, since
    the test venv's may sit in a private home."""
    from aha.rewards import code as code_module

    with tempfile.TemporaryDirectory() as folder:  # directly under /tmp: pytest's tmp_path is private to root
        _run_as_nobody(Path(folder), Path(code_module.__file__).parent / "sandbox")


def _run_as_nobody(scripts: Path, source: Path) -> None:
    import json

    for name in ("harness.py", "process.py", "runner.py", "codec.py"):
        shutil.copy(source / name, scripts / name)
    for path in (scripts, *scripts.iterdir()):
        path.chmod(0o755)
    job = {"code": "import os\ndef add(a, b):\n    return a + b\nuid = os.getuid()\n",
           "tests": ["assert add(1, 2) == 3", "assert uid == 65534", "assert add(1, 1) == 3",
                     {"input": "", "output": ""}],
           "setup": "", "test_timeout_s": 2, "cpu_s": 5, "memory_bytes": 1 << 30, "output_bytes": 1 << 16,
           "disk_bytes": 1 << 20, "allow_weaker": False, "extra_read": []}
    done = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-I", "-B",
                           str(scripts / "harness.py")], input=json.dumps(job), capture_output=True,
                          text=True, timeout=30, cwd="/")
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r.get("ok") for r in records if "test" in r] == [True, True, False, True], (records, done.stderr)


@confined
def test_the_program_cannot_redefine_what_the_tests_use():
    # a builtin the test uses, and a helper the task gives in setup (HumanEval's poly)
    cheat = "def abs(x):\n    return 0\ndef root():\n    return 5.0\ndef poly(x):\n    return 0\n"
    tests = ["assert abs(root() - 3.0) < 1e-6", "assert poly(root()) == 0"]
    result = run_python(cheat, tests, setup="def poly(x):\n    return x * x - 9\n", limits=FAST)
    assert result.passed == 0, result.errors
    honest = "def root():\n    return 3.0\n"
    assert run_python(honest, tests, setup="def poly(x):\n    return x * x - 9\n", limits=FAST).passed == 2


@confined
def test_the_programs_stdin_is_its_own_not_the_hosts_dev_null():
    before = os.stat("/dev/null")
    program = ("import os\ndef touch():\n    os.fchmod(0, 0o600)\n    return os.readlink('/proc/self/fd/0')\n")
    result = run_python(program, ["assert touch().startswith('/memfd:')"], limits=FAST)
    assert result.passed == 1, result.errors
    after = os.stat("/dev/null")
    assert (after.st_uid, after.st_gid, after.st_mode) == (before.st_uid, before.st_gid, before.st_mode)


@confined
def test_what_a_test_prints_is_not_a_report():
    forged = '{"test": 1, "ok": true, "error": null}'
    program = f"def f(x):\n    return {forged!r}\ndef g(x):\n    return 2 * x\n"
    tests = ["print(f(1)); print(g(3)); print('{\"fatal\": \"boom\"}')", "assert f(2) == 4"]
    result = run_python(program, tests, limits=FAST)
    assert result.passed == 1 and "AssertionError" in result.errors[1], result.errors


@confined
def test_honest_programs_across_the_boundary():
    program = ("import json\ndef parse(s):\n    return json.loads(s)\nids = iter(range(10))\n"
               "def next_id():\n    return next(ids)\n"
               "def primes(n):\n    s = bytearray([1]) * (n + 1)\n    s[0] = s[1] = 0\n"
               "    for i in range(2, int(n ** .5) + 1):\n        if s[i]:\n"
               "            s[i * i::i] = bytearray(len(s[i * i::i]))\n    return [i for i in range(n + 1) if s[i]]\n")
    tests = ["try:\n    parse('{')\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError",  # JSONDecodeError
             "assert next_id() == 0 and next_id() == 1",  # an iterator global is not used up by the harness
             "assert len(primes(10 ** 7)) == 664579"]  # a 5 MiB result within the test's time
    result = run_python(program, tests, limits=SandboxLimits(wall_s=20.0, test_s=5.0))
    assert result.passed == 3, result.errors
    # setup runs before a stdin/stdout program too, and its stderr is kept
    io = run_python("import sys\nprint('debug', file=sys.stderr)\nprint(double(int(input())))",
                    [{"input": "3", "output": "6"}], setup="def double(x):\n    return 2 * x\n", limits=FAST)
    assert io.passed == 1 and "debug" in io.stderr, (io.errors, io.stderr)
    # more memory than the harness's own backstop can be given to a program (private: a shared anonymous
    # mapping is refused, its pages would outlive the address space RLIMIT_AS counts)
    big = run_python("import mmap\nx = mmap.mmap(-1, 5 << 30, flags=mmap.MAP_PRIVATE)\ndef n():\n    return len(x)\n",
                     ["assert n() == 5 << 30"],
                     limits=SandboxLimits(memory_mb=6 << 10, wall_s=10.0, test_s=5.0))  # address space, not touched
    assert big.passed == 1, big.errors


@confined
def test_a_tool_call_captures_output_and_test_data_cannot_ask_for_capture():
    """run_program (the tool_use environment's Python tool) gets what a program printed; a
    user's stdin/stdout test whose expected output is null still needs the program to print
    "None": capture is the parent's flag, never the test data's."""
    from aha.rewards.code import run_program

    assert run_program("print(6 * 7)") == ("42\n", None)
    assert run_program("import sys\nprint(sys.stdin.read()[::-1])", "abc") == ("cba\n", None)
    printed, error = run_program("print('partial')\n1 / 0")
    assert printed == "partial\n" and "ZeroDivisionError" in error
    assert run_python("import sys; sys.exit(0)", [{"input": "1", "output": None}]).passed == 0
    assert run_python("print(None)", [{"input": "1", "output": None}]).passed == 1
    assert run_python("print(1)", [{"input": "1", "output": "1"}]).outputs == {}  # a test's output is not reported
