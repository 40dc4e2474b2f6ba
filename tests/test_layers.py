"""Imports go one way (docs/architecture.md): a package never imports one above it, lazily
or not, so the layers can be read, tested and replaced from the bottom up."""

import ast
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "aha"
# lower number = lower layer; config/ and jsonl.py are plain data and helpers, read by every layer
LAYER = {"algorithms": 0, "models": 1, "rollout": 2, "rewards": 2, "tasks": 2, "envs": 3, "eval": 3, "tracking": 3,
         "training": 4, "cli": 5}


def package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "aha" else None


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, top-level or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def module_name(path: Path) -> str:
    parts = ("aha",) + path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_package_imports_a_higher_one():
    wrong = []
    for path in SRC.rglob("*.py"):
        here = path.relative_to(SRC).parts[0].removesuffix(".py")
        for line, name in imports(path):
            there = package(name)
            if here in LAYER and there in LAYER and LAYER[there] > LAYER[here]:
                wrong.append(f"{path.relative_to(SRC)}:{line} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_no_two_modules_import_each_other():
    graph = {module_name(path): {name for _, name in imports(path)} for path in SRC.rglob("*.py")}
    pairs = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a != b and a in graph.get(b, ())})
    assert not pairs, pairs
