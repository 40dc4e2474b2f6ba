"""Format rewards: think/answer tag structure, JSON (optionally schema-valid), length limits, a
regular expression. Each is fn(completion, sample, **args) -> float in [0, 1]."""

from __future__ import annotations

import json
import math
import re

from aha.rewards.bounded import PATTERN_TIMEOUT_S, pattern_matches
from aha.rewards.shaping import count_words, generated_tokens


def think_answer_format(completion: str, sample: dict, think_tag: str = "think", answer_tag: str = "answer") -> float:
    """1.0 if the completion is exactly <think>...</think> then <answer>...</answer> (the R1
    template): each tag once, nothing outside them but whitespace, a non-empty answer."""
    t, a = re.escape(think_tag), re.escape(answer_tag)
    pattern = rf"\s*<{t}>(?:(?!</?{t}>|</?{a}>).)*</{t}>\s*<{a}>((?:(?!</?{t}>|</?{a}>).)*)</{a}>\s*"
    match = re.fullmatch(pattern, completion, flags=re.DOTALL)
    return 1.0 if match and match.group(1).strip() else 0.0


# \s*+ possessive: with \s* an unclosed fence before a long whitespace run retried the lazy
# scan to the end of the text once for every space it gave back (quadratic)
_FENCE = re.compile(r"```(?:json)?\s*+(.*?)```", re.DOTALL)
MAX_JSON_DEPTH = 128  # nesting levels read (serde_json's limit); deeper scores 0, never a RecursionError
MAX_INT_DIGITS = 4300  # Python's int-from-text limit: a longer integer is read as a float (inf), not an error


class _NotJson(ValueError):
    """Text that json_format scores 0: not RFC 8259 JSON (NaN, Infinity) or nested too deep."""


def _reject_constant(name: str):
    raise _NotJson(f"{name} is not JSON")


def _read_int(digits: str):
    return int(digits) if len(digits.lstrip("-")) <= MAX_INT_DIGITS else float(digits)


def _read_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: no float holds it (and a schema's multipleOf would overflow on it)
        raise _NotJson(f"{text[:20]} is past a float's range")
    return value


def _nesting(text: str) -> int:
    """The deepest [ / { nesting of a JSON text, brackets inside strings not counted (one linear scan)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def parse_json(text: str):
    """The value of a strict JSON text (RFC 8259: no NaN or Infinity), nested at most MAX_JSON_DEPTH
    deep; raises ValueError for anything else. Never a RecursionError, so a policy cannot stop a
    run by writing [[[[...]]]] (an error on every sample would trip max_reward_failure_rate)."""
    if _nesting(text) > MAX_JSON_DEPTH:
        raise _NotJson(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return json.loads(text, parse_constant=_reject_constant, parse_int=_read_int, parse_float=_read_float)


def json_format(completion: str, sample: dict, schema: dict | None = None) -> float:
    """1.0 if the completion (or its last ```json fenced block) is valid JSON and, when a JSON
    schema is given (`args.schema`, else sample["schema"]), valid against it. Strict JSON: NaN and
    Infinity score 0, as does nesting deeper than MAX_JSON_DEPTH; an integer of more than
    MAX_INT_DIGITS digits is read as a float (so an "integer" schema refuses it)."""
    import jsonschema

    fenced = _FENCE.findall(completion)
    text = fenced[-1] if fenced else completion
    try:
        value = parse_json(text)
    except ValueError:  # json.JSONDecodeError is a ValueError too
        return 0.0
    schema = schema if schema is not None else sample.get("schema")
    if schema is None:
        return 1.0
    try:
        jsonschema.validate(value, schema)
    except jsonschema.SchemaError:
        raise  # the config's or the dataset's schema is wrong: an error to fix, not a score
    except Exception:  # noqa: BLE001 - ValidationError, or a check that fails on the value (OverflowError)
        return 0.0
    return 1.0


def length_limit(completion: str, sample: dict, max_chars: int | None = None, max_words: int | None = None,
                 max_tokens: int | None = None, completion_tokens: int | None = None) -> float:
    """1.0 if the completion has at most max_chars characters, max_words words (split at
    invisible characters too: zero-width ones between words join none) and max_tokens tokens
    (the tokens the policy generated, which the composition gives; estimated from the text
    when called without them)."""
    if max_chars is None and max_words is None and max_tokens is None:
        raise ValueError("length_limit needs max_chars or max_words (or max_tokens) in reward[i].args")
    if max_chars is not None and len(completion) > max_chars:
        return 0.0
    if max_words is not None and count_words(completion) > max_words:
        return 0.0
    if max_tokens is not None and generated_tokens(completion, completion_tokens) > max_tokens:
        return 0.0
    return 1.0


def regex_match(completion: str, sample: dict, pattern: str | None = None, full: bool = False,
                timeout_s: float = PATTERN_TIMEOUT_S) -> float:
    """1.0 if the completion matches a regular expression: `pattern` from the config, else
    sample['pattern']. full=True requires the whole (stripped) completion to match. A completion
    the pattern does not decide within timeout_s seconds scores 0 (bounded.pattern_matches)."""
    pattern = pattern if pattern is not None else sample.get("pattern")
    if pattern is None:
        raise ValueError("regex_match needs a pattern: set reward[i].args.pattern or a 'pattern' field in the sample")
    return 1.0 if pattern_matches(pattern, completion.strip() if full else completion, full, timeout_s) else 0.0
