"""The tools of the tool_use environment: the built-in calculator and Python sandbox, and the
user's own functions (env.options.tools: {name: "module:function"}).

A call is read from the policy's turn in any of three forms, the earliest in the turn first:
  <tool_call>{"name": "lookup", "arguments": {"key": "k7"}}</tool_call>   the Hermes/Qwen
      chat templates' tool-call format (what a model trained on such a template writes)
  <tool name="lookup">{"key": "k7"}</tool>      a JSON object of keyword arguments, or the
      text itself as the one argument of a one-argument tool: <tool name="lookup">k7</tool>
  <lookup>k7</lookup>                           the short form, as <calc>...</calc> is written
A user tool runs in a worker process (rewards/pool.py: the reward workers' pool) with a
deadline: a tool that hangs or crashes costs its call, never the run. What it returns is
shown as text (a str as it is, anything else as JSON); what it raises, or its timeout, is
shown as an error line, and counted."""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path

from aha.rewards.functions import resolve_function
from aha.rewards.pool import WorkerPool

BUILT_IN_TOOLS = ("calc", "python")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_TOOL_TAG = re.compile(r"<tool\s+name\s*=\s*[\"']?([A-Za-z_][A-Za-z0-9_]*)[\"']?\s*>(.*?)(?:</tool>|$)", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict | str  # keyword arguments (a JSON object), or the call's text
    error: str | None = None  # a call written wrong (its JSON does not parse): shown instead of running it


@dataclass(frozen=True)
class ToolResult:
    output: str  # what the policy reads, after "Output: "
    status: str  # "ok", "error" (refused, raised, written wrong) or "timeout"


def user_tools(tools, base_dir: str | Path = ".") -> tuple[set[str], dict]:
    """env.options.tools as (built-in tool names, {name: user function}): a list of built-in
    names, or a mapping of names to "module:function" / "file.py:function" (or to the built-in
    of the same name). Every function is imported now; errors name env.options.tools.<name>."""
    if isinstance(tools, (list, tuple)):
        unknown = sorted(set(tools) - set(BUILT_IN_TOOLS))
        if unknown:
            raise ValueError(f"env.options.tools: unknown tool(s) {unknown} (known: calc, python; or give a mapping "
                             "{name: 'module:function'} for your own)")
        return set(tools), {}
    if not isinstance(tools, dict) or not tools:
        raise ValueError("env.options.tools must be a list of built-in tools or a mapping "
                         f"{{name: 'module:function'}}, got {tools!r}")
    built_in, functions = set(), {}
    for name, target in tools.items():
        key = f"env.options.tools.{name}"
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"{key}: a tool's name is a Python identifier (letters, digits, _)")
        if target in BUILT_IN_TOOLS or name in BUILT_IN_TOOLS:
            if target != name:
                raise ValueError(f"{key}: {name!r} and {target!r}: a built-in tool keeps its name (calc: calc)")
            built_in.add(name)
            continue
        if not isinstance(target, str):
            raise ValueError(f"{key}: must be 'module:function' or 'path/to/file.py:function', got {target!r}")
        functions[name] = _resolved(target, str(base_dir), key)  # once a process: an episode makes a ToolUse
    return built_in, functions


def _parameters(fn) -> list[inspect.Parameter]:
    return [p for p in inspect.signature(fn).parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def describe(name: str, fn) -> str:
    """One instruction line: how to call the tool, and the first line of its docstring."""
    params = _parameters(fn)
    doc = (inspect.getdoc(fn) or "").split("\n")[0]
    if len(params) == 1:
        call = f"<{name}>{params[0].name}</{name}>"
    else:
        call = f'<tool name="{name}">{json.dumps({p.name: "..." for p in params})}</tool>'
    return f"- {call}" + (f": {doc}" if doc else "")


def schema(name: str, fn) -> dict:
    """The tool as a chat template's `tools` entry (JSON schema of its arguments, all strings
    but where annotated int/float/bool)."""
    kinds = {int: "integer", float: "number", bool: "boolean", "int": "integer", "float": "number", "bool": "boolean"}
    params = _parameters(fn)
    properties = {p.name: {"type": kinds.get(p.annotation, "string")} for p in params}
    required = [p.name for p in params if p.default is inspect.Parameter.empty]
    return {"type": "function", "function": {"name": name, "description": inspect.getdoc(fn) or name,
                                             "parameters": {"type": "object", "properties": properties,
                                                            "required": required}}}


def find_call(action: str, names: set[str]) -> ToolCall | None:
    """The first tool call in the turn (in any of the three forms), or None: the turn is an answer."""
    short = re.compile(rf"<({'|'.join(sorted(names))})>(.*?)(?:</\1>|$)", re.DOTALL) if names else None
    found = [m for m in (_TOOL_CALL.search(action), _TOOL_TAG.search(action),
                         short.search(action) if short else None) if m is not None]
    if not found:
        return None
    match = min(found, key=lambda m: m.start())
    if match.re is _TOOL_CALL:
        try:
            call = json.loads(match.group(1))
            arguments = call.get("arguments", {})
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
            if not isinstance(call["name"], str) or not isinstance(arguments, dict):
                raise TypeError
        except (ValueError, TypeError, KeyError, AttributeError):
            return ToolCall("?", {}, 'error: a <tool_call> holds {"name": ..., "arguments": {...}} as JSON')
        return ToolCall(call["name"], arguments)
    name, body = match.group(1), match.group(2)
    if name in BUILT_IN_TOOLS:
        return ToolCall(name, body)
    text = body.strip()
    if text.startswith("{"):
        try:
            arguments = json.loads(text)
        except ValueError:
            return ToolCall(name, {}, f"error: the arguments of {name} are not a JSON object")
        return ToolCall(name, arguments) if isinstance(arguments, dict) else ToolCall(name, text)
    return ToolCall(name, text)


def keyword_arguments(name: str, fn, arguments: dict | str) -> dict:
    """The call's arguments as keywords of fn; ValueError saying what does not fit."""
    params = _parameters(fn)
    if isinstance(arguments, str):
        if len(params) != 1:
            raise ValueError(f'{name} takes {len(params)} arguments: write <tool name="{name}">{{...}}</tool>')
        arguments = {params[0].name: arguments}
    try:
        inspect.signature(fn).bind(**arguments)
    except TypeError as err:
        raise ValueError(f"{name}: {err}") from None
    return arguments


def call_tool(arguments: str, request: dict, base_dir: str = ".") -> str:
    """In a worker: the user tool request["target"] called with the JSON keyword arguments,
    its value as text (the pool's reward-function signature: completion, sample)."""
    fn = _resolved(request["target"], base_dir)
    value = fn(**json.loads(arguments))
    return value if isinstance(value, str) else json.dumps(value, default=str)


@functools.cache
def _resolved(target: str, base_dir: str, key: str = "env.options.tools"):
    return resolve_function(target, key=key, base_dir=base_dir)


@functools.cache
def tool_pool(base_dir: str, timeout_s: float) -> WorkerPool:
    """One worker process for the user tools of a run (calls come one at a time, from the
    episodes' steps), started at the first call and kept for the process's life."""
    pool = WorkerPool("aha.envs.tools:call_tool", {"base_dir": base_dir}, base_dir, 1, timeout_s)
    atexit.register(pool.close)
    return pool


def run_user_tool(name: str, target: str, fn, call: ToolCall, base_dir: str, timeout_s: float) -> ToolResult:
    """The user tool's answer to the call, run in the worker pool with a deadline."""
    try:
        kwargs = keyword_arguments(name, fn, call.arguments)
        payload = json.dumps(kwargs)
    except (ValueError, TypeError) as err:
        return ToolResult(f"error: {err}", "error")
    outcome = tool_pool(str(base_dir), float(timeout_s)).map([payload], [{"id": name, "target": target}])[0]
    if outcome.error is None:
        return ToolResult(str(outcome.value), "ok")
    if outcome.error.startswith("timed out"):
        return ToolResult(f"error: {name} timed out after {timeout_s:g} s", "timeout")
    return ToolResult(f"error: {outcome.error}", "error")
