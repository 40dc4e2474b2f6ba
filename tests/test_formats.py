"""Format rewards on well-formed and malformed completions."""

import pytest

from aha.rewards import json_format, length_limit, think_answer_format


@pytest.mark.parametrize("completion, expected", [
    ("<think>add them</think>\n<answer>42</answer>", 1.0),
    ("  <think>\nstep 1\nstep 2\n</think> <answer> x=3 </answer>\n", 1.0),
    ("<think>a</think><answer></answer>", 0.0),  # empty answer
    ("<answer>42</answer><think>late</think>", 0.0),  # wrong order
    ("Sure! <think>a</think><answer>1</answer>", 0.0),  # text outside the tags
    ("<think>a</think><answer>1</answer><answer>2</answer>", 0.0),  # two answers
    ("<think>a <answer>1</answer></think><answer>2</answer>", 0.0),  # nested
    ("<think>a</think>", 0.0),
])
def test_think_answer_format(completion, expected):
    assert think_answer_format(completion, {}) == expected


def test_json_format_with_and_without_schema():
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    assert json_format('{"answer": 3}', {}) == 1.0
    assert json_format("Here:\n```json\n{\"answer\": 3}\n```", {}, schema=schema) == 1.0
    assert json_format('{"answer": "three"}', {}, schema=schema) == 0.0  # wrong type
    assert json_format('{"answer": 3', {}) == 0.0  # not JSON
    assert json_format('{"result": 3}', {"schema": schema}) == 0.0  # schema from the sample


def test_length_limit():
    assert length_limit("one two three", {}, max_words=3) == 1.0
    assert length_limit("one two three four", {}, max_words=3) == 0.0
    assert length_limit("x" * 11, {}, max_chars=10) == 0.0
    with pytest.raises(ValueError, match="needs max_chars or max_words"):
        length_limit("x", {})
