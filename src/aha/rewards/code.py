"""Code rewards: run a completion's program against unit tests in a sandbox.

Each run is a fresh interpreter in its own process group and scratch folder, with a wall
timeout enforced here (the whole group is killed) and everything else enforced by the
child on itself before the candidate runs (aha/rewards/sandbox_runner.py: CPU, memory and
output limits, a read-only file system outside the scratch folder, no network, no new
processes, no reading the host outside the interpreter and system folders). Only tests the child reports as passed count, so a crash, a timeout or an
early exit fails every test not yet reported.

Tests (sample["tests"]) are either Python statements run in the program's namespace
(MBPP/HumanEval style: "assert add(1, 2) == 3"), or {"input", "output"} pairs run as
stdin -> stdout of the whole program (competitive-programming style). sample["setup"] is
optional code run before the program (imports the tests need).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

RUNNER = Path(__file__).with_name("sandbox_runner.py")
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


class SandboxError(RuntimeError):
    """The sandbox could not be set up as asked (a missing kernel feature, bad tests)."""


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0  # whole run, killed from outside
    test_s: float = 2.0  # each test, interrupted from inside
    cpu_s: int = 10  # CPU seconds (RLIMIT_CPU)
    memory_mb: int = 1024  # address space (RLIMIT_AS)
    output_kb: int = 1024  # any file the program writes, its stdout/stderr included (RLIMIT_FSIZE)
    extra_read: tuple[str, ...] = ()  # folders the program may read besides the interpreter's and the system's
    allow_weaker: bool = False  # run even where Landlock or seccomp is missing (not confined!)


@dataclass
class SandboxResult:
    passed: int
    total: int
    timed_out: bool  # the wall timeout killed the run
    exit_code: int | None
    errors: dict[int, str] = field(default_factory=dict)  # test index -> why it failed
    stdout: str = ""
    stderr: str = ""
    missing: list[str] = field(default_factory=list)  # confinement layers this machine lacks

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


def extract_code(completion: str) -> str:
    """The last fenced code block (```python, ```py or bare ```), else the whole text."""
    blocks = _FENCE.findall(completion)
    return blocks[-1] if blocks else completion


def _read_tail(path: Path, limit: int = 4000) -> str:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - limit))
        return f.read().decode("utf-8", "replace")


def run_python(code: str, tests: list, setup: str = "", limits: SandboxLimits = SandboxLimits()) -> SandboxResult:
    """Run `code` against `tests` in a confined child process; never raises for anything the
    program does (crash, hang, fork bomb, socket, writes outside its folder)."""
    if not isinstance(tests, list) or not tests:
        raise SandboxError("tests must be a non-empty list of Python statements or {input, output} pairs")
    nonce = secrets.token_hex(16)
    private = Path(tempfile.mkdtemp(prefix="aha-sandbox-io-"))  # the child's outputs; it cannot write here by path
    scratch = Path(tempfile.mkdtemp(prefix="aha-sandbox-"))
    try:
        report_path = private / "report.jsonl"
        job = {"code": code, "tests": tests, "setup": setup, "scratch": str(scratch), "nonce": nonce,
               "test_timeout_s": limits.test_s, "cpu_s": limits.cpu_s, "memory_bytes": limits.memory_mb << 20,
               "output_bytes": limits.output_kb << 10, "allow_weaker": limits.allow_weaker,
               "extra_read": list(limits.extra_read)}
        env = {"PATH": "/usr/bin:/bin", "HOME": str(scratch), "TMPDIR": str(scratch), "LANG": "C.UTF-8"}
        with open(report_path, "w") as report, open(private / "stdout", "w") as out, open(private / "stderr", "w") as err:
            job["report_fd"] = report.fileno()
            proc = subprocess.Popen([sys.executable, "-I", "-B", str(RUNNER)], stdin=subprocess.PIPE, stdout=out,
                                    stderr=err, pass_fds=(report.fileno(),), cwd=scratch, env=env,
                                    start_new_session=True)
        timed_out = False
        try:
            proc.communicate(json.dumps(job).encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            try:  # the whole group: nothing the program started may outlive it
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        return _parse(report_path, private, nonce, len(tests), timed_out, proc.returncode)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(private, ignore_errors=True)


def _parse(report_path: Path, private: Path, nonce: str, total: int, timed_out: bool, exit_code: int) -> SandboxResult:
    result = SandboxResult(0, total, timed_out, None if timed_out else exit_code,
                           stdout=_read_tail(private / "stdout"), stderr=_read_tail(private / "stderr"))
    confined, missing = False, []
    passed: set[int] = set()
    with open(report_path, encoding="utf-8", errors="replace") as f:
        for line in f.read(1 << 20).splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(record, dict) or record.get("nonce") != nonce:
                continue  # only the runner knows the nonce
            if "confined" in record:
                confined, missing = True, list(record["missing"])
                if missing and exit_code == 3:
                    raise SandboxError("the code sandbox cannot confine programs on this machine: "
                                       + "; ".join(record["missing"])
                                       + " (Linux with Landlock and seccomp is required; allow_weaker=True runs unconfined)")
            elif confined and isinstance(record.get("test"), int) and 0 <= record["test"] < total:
                if record.get("ok"):
                    passed.add(record["test"])
                else:
                    result.errors[record["test"]] = str(record.get("error"))
    result.missing = missing
    if not confined and not timed_out:
        raise SandboxError(f"the sandbox runner failed before confining (exit {exit_code}): {result.stderr[-1000:]}")
    result.passed = len(passed)
    for i in range(total):
        if i not in passed and i not in result.errors:
            result.errors[i] = "timed out" if timed_out else f"not run (the program exited with {exit_code})"
    return result


def sandbox_support() -> list[str]:
    """The confinement layers this machine cannot apply (empty: fully confined)."""
    return run_python("", ["pass"], limits=SandboxLimits(allow_weaker=True)).missing


def code_tests(completion: str, sample: dict, partial_credit: bool = True, wall_s: float = 10.0,
               test_s: float = 2.0, cpu_s: int = 10, memory_mb: int = 1024, output_kb: int = 1024,
               extra_read: list[str] | tuple[str, ...] = ()) -> float:
    """The fraction of sample["tests"] the completion's program passes in the sandbox (or 1/0
    with partial_credit=False). A program that crashes, hangs or breaks the rules scores 0
    for the tests it did not pass."""
    if "tests" not in sample:
        raise SandboxError(f"sample {sample.get('id', '?')} has no 'tests' field for code_tests")
    limits = SandboxLimits(wall_s=wall_s, test_s=test_s, cpu_s=cpu_s, memory_mb=memory_mb, output_kb=output_kb,
                           extra_read=tuple(extra_read))
    result = run_python(extract_code(completion), sample["tests"], sample.get("setup", ""), limits)
    return result.fraction if partial_credit else float(result.passed == result.total)
