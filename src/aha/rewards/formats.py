"""Format rewards: think/answer tag structure, JSON (optionally schema-valid), length limits.
Each is fn(completion, sample, **args) -> float in [0, 1]."""

from __future__ import annotations

import json
import re


def think_answer_format(completion: str, sample: dict, think_tag: str = "think", answer_tag: str = "answer") -> float:
    """1.0 if the completion is exactly <think>...</think> then <answer>...</answer> (the R1
    template): each tag once, nothing outside them but whitespace, a non-empty answer."""
    t, a = re.escape(think_tag), re.escape(answer_tag)
    pattern = rf"\s*<{t}>(?:(?!</?{t}>|</?{a}>).)*</{t}>\s*<{a}>((?:(?!</?{t}>|</?{a}>).)*)</{a}>\s*"
    match = re.fullmatch(pattern, completion, flags=re.DOTALL)
    return 1.0 if match and match.group(1).strip() else 0.0


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def json_format(completion: str, sample: dict, schema: dict | None = None) -> float:
    """1.0 if the completion (or its last ```json fenced block) is valid JSON and, when a JSON
    schema is given (`args.schema`, else sample["schema"]), valid against it."""
    import jsonschema

    fenced = _FENCE.findall(completion)
    text = fenced[-1] if fenced else completion
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return 0.0
    schema = schema if schema is not None else sample.get("schema")
    if schema is None:
        return 1.0
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return 0.0
    return 1.0


def length_limit(completion: str, sample: dict, max_chars: int | None = None, max_words: int | None = None) -> float:
    """1.0 if the completion has at most max_chars characters and max_words words."""
    if max_chars is None and max_words is None:
        raise ValueError("length_limit needs max_chars or max_words in reward[i].args")
    if max_chars is not None and len(completion) > max_chars:
        return 0.0
    if max_words is not None and len(completion.split()) > max_words:
        return 0.0
    return 1.0
