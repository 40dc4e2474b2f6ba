"""json_format scores what a policy writes, never raises on it: a reward that raised on every
sample would let a policy stop the run through train.max_reward_failure_rate (issue 29, kind 5)."""

import pytest

from aha.rewards import formats, json_format

MAX_JSON_DEPTH = 128  # documented in docs/rewards.md; checked against the module below

RECURSIVE = {"type": "array", "items": {"$ref": "#"}}  # a schema that recurses as deep as the value
INTEGER = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.mark.parametrize("text", [
    "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1),
    "[" * 100_000 + "]" * 100_000,  # past the interpreter's recursion limit
    '{"a": ' * 5_000 + "1" + "}" * 5_000,
    "```json\n" + "[" * 50_000 + "]" * 50_000 + "\n```",
    "[" * 100_000,  # deep and never closed
])
def test_deep_nesting_scores_zero(text):
    assert json_format(text, {}) == 0.0
    assert json_format(text, {}, schema=RECURSIVE) == 0.0


def test_nesting_up_to_the_limit_is_json_and_brackets_in_strings_do_not_count():
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert json_format(at_limit, {}) == 1.0
    assert json_format(at_limit, {}, schema=RECURSIVE) == 1.0
    assert json_format('{"s": "' + "[" * 10_000 + '", "t": "\\"' + "{" * 500 + '"}', {}) == 1.0


@pytest.mark.parametrize("digits", [4_301, 10_000, 200_000])
def test_huge_integers_are_read_not_raised(digits):
    text = '{"n": ' + "9" * digits + "}"
    assert json_format(text, {}) == 1.0  # valid JSON
    assert json_format(text, {}, schema=INTEGER) == 0.0  # but not an integer any parser keeps exactly
    assert json_format('{"n": -' + "9" * digits + "}", {}, schema=INTEGER) == 0.0
    assert json_format('{"n": ' + "9" * 4_300 + "}", {}, schema=INTEGER) == 1.0  # the largest read exactly
    assert formats.parse_json("9" * 4_300) == int("9" * 4_300)


@pytest.mark.parametrize("text", ["NaN", '{"n": Infinity}', "[-Infinity]", '{"a": [1, NaN]}'])
def test_nan_and_infinity_are_not_json(text):
    assert json_format(text, {}) == 0.0


def test_ordinary_json_scores_as_before():
    assert json_format('{"n": 3}', {}, schema=INTEGER) == 1.0
    assert json_format('{"n": 1e300}', {}) == 1.0


@pytest.mark.parametrize("text", ["1e400", '{"n": -1e400}', "9" * 5_000])
def test_a_number_past_a_floats_range_scores_zero_even_where_the_schema_would_overflow(text):
    multiple = {"type": "number", "multipleOf": 0.01}  # jsonschema raised OverflowError on 1e400
    assert json_format(text, {}, schema=multiple) == 0.0
    if "e" in text:
        assert json_format(text, {}) == 0.0  # a float no float holds is not read as inf
    assert json_format('{"n": 3.5}', {}, schema=INTEGER) == 0.0
    with pytest.raises(ValueError):
        formats.parse_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))


def test_the_documented_limits():
    assert (formats.MAX_JSON_DEPTH, formats.MAX_INT_DIGITS) == (MAX_JSON_DEPTH, 4_300)
