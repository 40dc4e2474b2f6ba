"""Imports go one way (docs/architecture.md, "Layers"): a module never imports one above it,
lazily or not, nor one beside it in another unit of its layer (the RL method and the
supervised methods know nothing of each other), so the layers can be read, tested and
replaced from the bottom up."""

import ast
from pathlib import Path

SRC = Path(__file__).parent.parent / "src" / "aha"
# From the bottom up. A module belongs to the longest of these prefixes it starts with; it may
# import its own unit and any unit of a lower layer. aha/training/*.py is the run itself (the
# loop's parts, checkpoints, the optimizer, log-probs); its methods sit above it, the registry
# of methods above them, and the loop, which picks a method, on top.
LAYERS = [
    ("aha.config", "aha.jsonl", "aha.errors"),
    ("aha.prompts", "aha.ray_cluster"),
    ("aha.algorithms",),
    ("aha.models",),
    ("aha.rollout",),
    ("aha.rewards",),
    ("aha.tasks",),
    ("aha.envs",),
    ("aha.tracking",),
    ("aha.eval",),
    ("aha.training",),
    ("aha.training.rl", "aha.training.supervised"),
    ("aha.training.methods",),
    ("aha.training.loop",),
    ("aha.perf",),
    ("aha.cli",),
    ("aha.api",),
]
UNITS = {unit: layer for layer, units in enumerate(LAYERS) for unit in units}


def unit_of(module: str) -> str | None:
    """The longest unit prefix of module ('aha.training.rl.update' -> 'aha.training.rl')."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in UNITS:
            return ".".join(parts[:n])
    return None


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, top-level or inside a function, with
    `from aha.x import y` also read as aha.x.y (y may be a module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
    return found


def module_name(path: Path, src: Path = SRC) -> str:
    parts = ("aha",) + path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def wrong_imports(src: Path = SRC) -> list[str]:
    wrong = []
    for path in sorted(src.rglob("*.py")):
        here = unit_of(module_name(path, src))
        for line, name in imports(path):
            there = unit_of(name)
            if here is None or there is None or there == here:
                continue
            if UNITS[there] >= UNITS[here]:  # above, or beside in another unit of the same layer
                wrong.append(f"{path.relative_to(src)}:{line} imports {name} ({here} may not import {there})")
    return wrong


def test_every_module_is_in_a_layer():
    assert [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if unit_of(module_name(p)) is None] == ["__init__.py"]


def test_no_module_imports_a_higher_or_sibling_unit():
    wrong = wrong_imports()
    assert not wrong, "\n".join(wrong)


def test_a_reversed_import_is_caught(tmp_path):
    """The check itself: a tracking module that imports the trainer, and a supervised method
    that imports the RL update, are both named."""
    for path in SRC.rglob("*.py"):
        copy = tmp_path / path.relative_to(SRC)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text())
    (tmp_path / "tracking" / "sinks.py").write_text("from aha.training.loop import train\n")
    (tmp_path / "training" / "supervised" / "sft.py").write_text("import aha.training.rl.update\n")
    assert wrong_imports(tmp_path) == [
        "tracking/sinks.py:1 imports aha.training.loop (aha.tracking may not import aha.training.loop)",
        "training/supervised/sft.py:1 imports aha.training.rl.update "
        "(aha.training.supervised may not import aha.training.rl)"]


def test_no_two_modules_import_each_other():
    graph = {module_name(path): {name for _, name in imports(path)} for path in SRC.rglob("*.py")}
    pairs = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a != b and a in graph.get(b,
            ())})
    assert not pairs, pairs


def test_the_architecture_page_states_these_layers():
    """docs/architecture.md lists the layers in the order this file checks: each numbered
    line's units are the backticked names before its first colon."""
    import re

    text = (SRC.parent.parent / "docs" / "architecture.md").read_text()
    listed = text.split("<!-- layers: the order tests/test_layers.py checks -->")[1].split("\n## ")[0]
    stated = []
    for line in re.findall(r"^\d+\. (.*)$", listed, re.MULTILINE):
        names = re.findall(r"`([^`]+)`", line.split(":")[0])
        stated.append(tuple("aha." + n.removesuffix("/").removesuffix(".py").replace("/", ".") for n in names))
    assert stated == LAYERS
