"""The paper index only names tests that exist, and every recipe it names exists."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parent.parent
INDEX = (ROOT / "docs" / "paper_index.md").read_text()


def test_every_test_named_in_the_paper_index_exists():
    named = re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", INDEX)
    assert len(named) > 30
    for path, name in named:
        source = ROOT / path
        assert source.is_file(), path
        functions = {n.name for n in ast.walk(ast.parse(source.read_text())) if isinstance(n, ast.FunctionDef)}
        assert name in functions, f"{path}::{name} named in docs/paper_index.md does not exist"


def test_every_recipe_named_in_the_paper_index_exists():
    for recipe in re.findall(r"`(configs/\w+\.yaml)`", INDEX):
        assert (ROOT / recipe).is_file(), recipe


def test_every_config_key_named_exists():
    from aha.config import AlgorithmConfig

    for key in re.findall(r"`algorithm\.(\w+)", INDEX):
        assert key in AlgorithmConfig.model_fields, key
