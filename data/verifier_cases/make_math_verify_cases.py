"""Write math_verify_cases.jsonl: Math-Verify's own test cases, one per line.

Usage: python make_math_verify_cases.py TESTS_DIR
where TESTS_DIR is the tests/ folder of Math-Verify's source distribution, e.g.
    pip download math-verify==0.9.0 --no-binary :all: --no-deps && tar xzf math_verify-0.9.0.tar.gz
    python data/verifier_cases/make_math_verify_cases.py math_verify-0.9.0/tests

Selection: every row of every @pytest.mark.parametrize table whose test compares a gold and a
prediction through math-verify's parse() + verify() -- by the `compare_strings` helper of
tests/test_all.py or by calling parse/verify directly -- except the two tests whose subject is
a non-default verify() option (test_strict_variable_comparison: strict=False;
test_set_rel_assymetry: allow_set_relation_comp=True). Each row records the test's own
extraction targets (`match_types`) and float rounding (`precision`), so a reader can rerun
math-verify exactly as the test does. The rows are read with the ast module, not executed
(only test_float_precision's f-string is evaluated, with the math module)."""

from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

FILES = ["test_all.py", "test_boxed.py", "test_numina_cases.py", "test_open_thoughts.py", "test_yujianll.py",
         "test_strict.py"]
SKIPPED_TESTS = {"test_strict_variable_comparison", "test_set_rel_assymetry"}  # non-default verify options
OUT = Path(__file__).with_name("math_verify_cases.jsonl")


def _helper_call(fn: ast.FunctionDef) -> tuple[str, list[str] | None, ast.expr | None] | None:
    """How the test calls math-verify: ('compare_strings', match_types, precision node) or
    ('parse/verify', None, None); None if it calls neither."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id == "compare_strings":
                keywords = {k.arg: k.value for k in node.keywords}
                types = ast.literal_eval(keywords["match_types"]) if "match_types" in keywords else ["latex", "expr"]
                return "compare_strings", types, keywords.get("precision")
            if node.func.id == "verify":
                return "parse/verify", None, None
    return None


def _rows(table: ast.expr) -> list[tuple]:
    try:
        return ast.literal_eval(table)
    except ValueError:  # test_float_precision builds its gold with an f-string over math.sqrt
        return eval(compile(ast.Expression(table), "<table>", "eval"), {"math": math})


def cases_from(path: Path) -> list[dict]:
    cases = []
    for fn in ast.parse(path.read_text()).body:
        if not isinstance(fn, ast.FunctionDef) or fn.name in SKIPPED_TESTS:
            continue
        call = _helper_call(fn)
        tables = [d for d in fn.decorator_list if isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "parametrize"]
        if call is None or not tables:
            continue
        helper, match_types, precision = call
        names = [n.strip() for n in ast.literal_eval(tables[0].args[0]).split(",")]
        for row in _rows(tables[0].args[1]):
            values = dict(zip(names, row))
            if isinstance(precision, ast.Name):
                digits = values[precision.id]
            elif precision is not None:
                digits = ast.literal_eval(precision)
            else:
                digits = 6  # compare_strings' and verify's default float_rounding
            cases.append({"source": f"tests/{path.name}", "test": fn.name, "helper": helper,
                          "match_types": match_types, "precision": digits, "gold": values["gold"],
                          "prediction": values["pred"], "expected": int(values.get("expected", values.get("result")))})
    return cases


def main(tests_dir: str) -> None:
    cases = [case for name in FILES for case in cases_from(Path(tests_dir) / name)]
    with OUT.open("w") as out:
        for number, case in enumerate(cases):
            out.write(json.dumps({"id": f"mv-{number}", **case}, ensure_ascii=False) + "\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main(sys.argv[1])
