"""Code rewards: run a completion's program against unit tests in a sandbox.

The program and the tests never share an interpreter. A harness process
(aha/rewards/sandbox/harness.py) holds the tests and the expected values; the program runs
in a separate process inside bubblewrap (aha/rewards/sandbox/runner.py): an empty root with
the interpreter and /usr read-only, a size-limited /tmp, its own pid, IPC, network, UTS and
cgroup namespaces, uid 65534 without capabilities, rlimits, Landlock and seccomp. They
exchange plain data over pipes (tagged JSON, aha/rewards/sandbox/codec.py), and every wait has a
deadline kept by the harness. The parent here kills the harness and everything it started
at `wall_s`. Only tests the harness reports as passed count.

Tests (sample["tests"]) are either Python statements (MBPP/HumanEval style:
"assert add(1, 2) == 3", "def check(candidate): ...\ncheck(add)") that run in the harness
on proxies of the program's functions, or {"input", "output"} pairs: the whole program runs
on the input in a fresh sandbox and the harness compares its output. sample["setup"] is
optional code run before the program and before each test (imports both need, helpers the
tests call); sample["entry_point"] (a name or a list) optionally limits what of the program
the tests see (HumanEval: setup = the prompt, entry_point = the function).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

HARNESS = Path(__file__).parent / "sandbox" / "harness.py"


class SandboxError(RuntimeError):
    """The sandbox could not be set up as asked (a missing kernel feature or tool, bad tests)."""


@dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0  # everything (all tests, start-ups included), killed from outside
    test_s: float = 2.0  # each test, kept by the harness
    cpu_s: int = 10  # CPU seconds of one program process (RLIMIT_CPU)
    memory_mb: int = 1024  # address space of one program process (RLIMIT_AS)
    output_kb: int = 1024  # stdout of a stdin/stdout test, and any one file the program writes (RLIMIT_FSIZE)
    disk_mb: int = 64  # all files the program writes together (the size of its /tmp)
    extra_read: tuple[str, ...] = ()  # host folders bound read-only into the sandbox (e.g. data the program reads)
    allow_weaker: bool = False  # run even where Landlock or seccomp is missing (bubblewrap is always required)


@dataclass
class SandboxResult:
    passed: int
    total: int
    timed_out: bool  # the wall timeout killed the run
    exit_code: int | None  # the harness's
    errors: dict[int, str] = field(default_factory=dict)  # test index -> why it failed
    outputs: dict[int, str] = field(default_factory=dict)  # a capture test's index -> what the program printed
    stdout: str = ""  # the harness's own output (its report), for debugging
    stderr: str = ""  # the tail of what the program wrote to stderr (and, for statement tests, stdout)
    missing: list[str] = field(default_factory=list)  # confinement layers this machine lacks

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0


PYTHON_FENCES = ("", "python", "python3", "py")


# a fence ending its line, after prose or not, read on the REVERSED line: the line's end is the
# pattern's start, so a line is matched once (searching for "```...$" retries the tail from every
# backtick and every space: quadratic on a long run of either); possessive runs of disjoint sets
_OPENING_REVERSED = re.compile(r"[ \t]*+([\w+.-]*+)[ \t]*+(`{3,}+)")


def _opening(line: str) -> tuple[str, str] | None:
    """(fence, language) when the line ends with an opening fence ("```", "````python ")."""
    match = _OPENING_REVERSED.match(line[::-1])
    return (match.group(2), match.group(1)[::-1].lower()) if match else None


def code_blocks(completion: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block, fences paired line by line: a block opens at
    three or more backticks ending a line (after prose too: "Here it is: ```python") and
    closes at a line ending with as many, so the closing fence of a ```text block never opens
    another. The block is dedented by its opening fence's indent (a fence in a list item).
    A block left open at the end runs to the end."""
    blocks, fence, language, indent, lines = [], None, "", 0, []

    def close() -> None:
        body = [line[min(indent, len(line) - len(line.lstrip(" "))):] for line in lines]
        blocks.append((language, "\n".join(body) + "\n"))

    for line in completion.splitlines():
        stripped = line.strip()
        if fence is None:
            opening = _opening(line)
            if opening:
                (fence, language), lines = opening, []
                indent = len(line) - len(line.lstrip(" ")) if stripped.startswith("`") else 0
        elif stripped.endswith(fence):
            before = line[:line.rindex(fence)]
            if before.strip():
                lines.append(before)
            close()
            fence = None
        else:
            lines.append(line)
    if fence is not None:
        close()
    return blocks


def _as_names(entry_point) -> list:
    """sample["entry_point"] as a list: one name, a list of names, or none."""
    return [entry_point] if isinstance(entry_point, str) else list(entry_point or [])


def _defines(code: str, name: str) -> bool:
    """True if a line of `code` starts (after spaces) with "def name" or "async def name"."""
    # the indent may not cross a line break (\s* did: each line start of a run of blank lines
    # rescanned the rest of the run, quadratic)
    return re.search(rf"^[^\S\n]*+(?:async\s++)?def\s++{re.escape(name)}\b", code, re.MULTILINE) is not None


def extract_code(completion: str, entry_point: str | list[str] | None = None) -> str:
    """The program in a completion: the last ```python, ```py or bare ``` block (the last one
    that defines the entry point, when one is named, so a usage example written after the
    solution is not taken for it), else the whole text."""
    blocks = [code for language, code in code_blocks(completion) if language in PYTHON_FENCES]
    if not blocks:
        return completion
    names = _as_names(entry_point)
    if names:
        defining = [code for code in blocks if any(_defines(code, n) for n in names)]
        if defining:
            return defining[-1]
    return blocks[-1]


def _check_tests(tests) -> None:
    if not isinstance(tests, list) or not tests:
        raise SandboxError("tests must be a non-empty list of Python statements or {input, output} pairs")
    for i, test in enumerate(tests):
        if isinstance(test, dict):
            if set(test) != {"input", "output"}:
                raise SandboxError(f"tests[{i}]: a stdin/stdout test has exactly the keys 'input' and 'output'")
        elif not isinstance(test, str):
            raise SandboxError(f"tests[{i}]: a test is a Python statement (str) or an {{input, output}} dict")
        else:
            try:
                compile(test, f"tests[{i}]", "exec")
            except SyntaxError as err:
                raise SandboxError(f"tests[{i}] is not valid Python: {err.msg} (line {err.lineno})") from None


def _check_extra_read(paths) -> list[str]:
    """The folders as real paths; each must exist and be readable by everyone, since the
    program runs as uid 65534 (nobody)."""
    real = []
    for path in paths:
        full = os.path.realpath(path)
        if not os.path.isdir(full):
            raise SandboxError(f"extra_read: {path} is not a folder")
        if os.stat(full).st_mode & 0o005 != 0o005:
            raise SandboxError(f"extra_read: {path} is not readable by other users (the program runs as nobody): "
                               f"chmod o+rx it, or bind a readable copy")
        real.append(full)
    return real


def _entry_points(entry_point) -> list[str]:
    names = _as_names(entry_point)
    bad = [n for n in names if not isinstance(n, str) or not n.isidentifier()]
    if bad:
        raise SandboxError(f"entry_point: {bad[0]!r} is not a Python name")
    return names


def run_python(code: str, tests: list, setup: str = "", limits: SandboxLimits = SandboxLimits(),
               entry_point: str | list[str] | None = None) -> SandboxResult:
    """Run `code` against `tests` (program and tests in separate processes, the program in a
    sandbox); never raises for anything the program does (crash, hang, fork bomb, socket,
    writes outside its folder, patching its own interpreter). With `entry_point`, statement
    tests see only those names of the program; everything else they use comes from `setup`."""
    _check_tests(tests)
    return _run_harness(code, tests, setup, limits, entry_point)


def run_program(code: str, stdin: str = "", limits: SandboxLimits = SandboxLimits()) -> tuple[str, str | None]:
    """Run a whole program once in the sandbox on `stdin` (a tool call): (what it printed,
    None or why it failed: a crash with the tail of its stderr, a timeout, too much output)."""
    result = _run_harness(code, [{"input": stdin, "output": ""}], "", limits, None, capture=True)
    return result.outputs.get(0, ""), result.errors.get(0)


def _run_harness(code: str, tests: list, setup: str, limits: SandboxLimits,
                 entry_point: str | list[str] | None, capture: bool = False) -> SandboxResult:
    job = {"capture": capture, "code": code, "tests": tests, "setup": setup, "entry_point": _entry_points(entry_point),
           "test_timeout_s": limits.test_s, "cpu_s": limits.cpu_s,
           "memory_bytes": limits.memory_mb << 20, "output_bytes": limits.output_kb << 10,
           "disk_bytes": limits.disk_mb << 20, "allow_weaker": limits.allow_weaker,
           "extra_read": _check_extra_read(limits.extra_read), "caller_pid": os.getpid()}
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    proc = subprocess.Popen([sys.executable, "-I", "-B", str(HARNESS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, cwd="/", start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(json.dumps(job).encode(), timeout=limits.wall_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        try:  # the harness and every sandbox it started (bubblewrap dies with its parent)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if timed_out:
        out, err = proc.communicate()
    return _parse(out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), len(tests), timed_out,
                  proc.returncode)


def _parse(out: str, err: str, total: int, timed_out: bool, exit_code: int) -> SandboxResult:
    result = SandboxResult(0, total, timed_out, None if timed_out else exit_code, stdout=out[-4000:])
    passed: set[int] = set()
    for line in out.splitlines():
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if not isinstance(record, dict):
            continue
        if "fatal" in record:
            raise SandboxError(record["fatal"])
        if "missing" in record:
            result.missing = list(record["missing"])
        elif "log" in record:
            result.stderr = record["log"]
        elif isinstance(record.get("test"), int) and 0 <= record["test"] < total:
            index = record["test"]
            if index in passed or index in result.errors:
                continue  # one result a test; the harness writes exactly one
            if isinstance(record.get("output"), str):
                result.outputs[index] = record["output"]
            if record.get("ok") is True:
                passed.add(index)
            else:
                result.errors[index] = str(record.get("error"))
    if not timed_out and exit_code != 0:
        raise SandboxError(f"the sandbox harness failed (exit {exit_code}): {err[-1500:]}")
    result.passed = len(passed)
    for i in range(total):
        if i not in passed and i not in result.errors:
            result.errors[i] = "timed out" if timed_out else "not run"
    return result


def sandbox_support() -> list[str]:
    """The confinement layers this machine cannot apply (empty: fully confined), or why the
    sandbox cannot start at all (e.g. bubblewrap is not installed)."""
    try:
        return run_python("", ["pass"], limits=SandboxLimits(allow_weaker=True)).missing
    except SandboxError as err:
        return [str(err)]


def code_tests(completion: str, sample: dict, partial_credit: bool = True, wall_s: float = 10.0,
               test_s: float = 2.0, cpu_s: int = 10, memory_mb: int = 1024, output_kb: int = 1024,
               disk_mb: int = 64, extra_read: list[str] | tuple[str, ...] = ()) -> float:
    """The fraction of sample["tests"] the completion's program passes in the sandbox (or 1/0
    with partial_credit=False). A program that crashes, hangs or breaks the rules scores 0
    for the tests it did not pass."""
    if "tests" not in sample:
        raise SandboxError(f"sample {sample.get('id', '?')} has no 'tests' field for code_tests")
    limits = SandboxLimits(wall_s=wall_s, test_s=test_s, cpu_s=cpu_s, memory_mb=memory_mb, output_kb=output_kb,
                           disk_mb=disk_mb, extra_read=tuple(extra_read))
    program = extract_code(completion, sample.get("entry_point"))
    result = run_python(program, sample["tests"], sample.get("setup", ""), limits,
                        entry_point=sample.get("entry_point"))
    return result.fraction if partial_credit else float(result.passed == result.total)
