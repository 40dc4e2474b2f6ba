"""Built-in environments: try_again (answer, hear that it is wrong, answer again) and
tool_use (call a calculator, a sandboxed Python tool or the user's own functions, read the
output, then answer)."""

from __future__ import annotations

import ast
import functools
import json
import math
import operator
from fractions import Fraction

from aha.envs.base import Turn
from aha.envs.tools import (
    BUILT_IN_TOOLS,
    ToolCall,
    ToolResult,
    describe,
    find_call,
    run_user_tool,
    schema,
    user_tools,
)
from aha.prompts import check_prompt


def _judge(reward, action: str, sample: dict, correct_min: float) -> tuple[float, bool]:
    """The run's reward of an answer, and whether it counts as right. A score that failed (the
    reward raised, or gave NaN) is NaN: the episode's return is then non-finite, counted in
    reward/failed and given no advantage, as a failed single completion is."""
    result = reward.score([action], [sample])
    score = float(result.total[0])
    if bool(result.failed[0]) or not math.isfinite(score):
        return float("nan"), False
    return score, score >= correct_min


class TryAgain:
    """After a wrong answer the environment says so and the policy answers again, until it is
    right or the episode's turns run out. A right answer at turn t earns its score times
    discount^(t - 1), so fewer turns pay more; a wrong one earns 0. info: correct (0/1)."""

    def __init__(self, reward, discount: float = 0.5, feedback: str = "That is not correct. Try again.",
                 correct_min: float = 1.0):
        if not 0 <= discount <= 1:
            raise ValueError(f"env.options.discount must be in [0, 1], got {discount}")
        self.reward, self.discount, self.feedback, self.correct_min = reward, discount, feedback, correct_min
        self.sample: dict = {}
        self.turns = 0

    def reset(self, sample: dict):
        self.sample, self.turns = sample, 0
        return sample["prompt"]

    def step(self, action: str) -> Turn:
        self.turns += 1
        score, right = _judge(self.reward, action, self.sample, self.correct_min)
        if right:
            return Turn(score * self.discount ** (self.turns - 1), True, info={"correct": 1.0})
        if math.isnan(score):  # no verdict: the episode ends, its return failed
            return Turn(score, True, info={"correct": 0.0})
        return Turn(0.0, False, self.feedback, info={"correct": 0.0})


# what the calculator computes: numbers, + - * / // % **, unary signs and parentheses
_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_EXPRESSION = 300  # characters
_MAX_BITS = 4096  # of any numerator or denominator along the way: exact fractions stay cheap


def _bounded(value: Fraction) -> Fraction:
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > _MAX_BITS:
        raise ValueError("a number along the way is too large")
    return value


def calculate(expression: str) -> str:
    """The value of an arithmetic expression, computed exactly (fractions) and written as an
    integer or a decimal; a message saying what is wrong otherwise. Parsed, never run; every
    number along the way stays under 4096 bits, so no expression takes long."""
    text = expression.replace("×", "*").replace("÷", "/").replace("^", "**").replace(",", "").strip()
    if not text:
        return "error: empty expression"
    if len(text) > _MAX_EXPRESSION:
        return f"error: expression longer than {_MAX_EXPRESSION} characters"
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return f"error: not an arithmetic expression: {expression.strip()[:80]}"

    def value(node) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return _bounded(Fraction(node.value))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow):
                if right.denominator != 1:
                    raise ValueError("powers need a whole exponent")
                size = max(left.numerator.bit_length(), left.denominator.bit_length())
                if size * abs(right.numerator) > _MAX_BITS:  # refused before it is computed
                    raise ValueError("a number along the way is too large")
                right = int(right)
            return _bounded(Fraction(_BINARY[type(node.op)](left, right)))
        raise ValueError(f"{type(node).__name__} is not arithmetic")

    try:
        result = value(tree.body)
    except ZeroDivisionError:
        return "error: division by zero"
    except (ValueError, OverflowError) as err:
        return f"error: {err}"
    if result.denominator == 1:
        return str(result.numerator)
    return f"{float(result):.10g}"


@functools.cache
def _check_sandbox() -> None:
    """The Python tool runs programs in the code sandbox: refuse it, once a process, where the
    sandbox cannot confine them (before training starts: the first environment is made then)."""
    from aha.rewards.code import sandbox_support

    missing = sandbox_support()
    if missing:
        raise ValueError("env.options.tools: the python tool needs the code sandbox, which cannot confine programs "
                         f"here ({'; '.join(missing)}); use tools: [calc]")


TOOL_INSTRUCTIONS = ("You may use tools before you answer. To compute, write <calc>expression</calc>; to run Python, "
                     "write <python>code</python> (print what you need). You will see the result. "
                     "When you know the answer, give it without a tool call.")
_BUILT_IN_LINES = {"calc": "- <calc>expression</calc>: computes an arithmetic expression exactly",
                   "python": "- <python>code</python>: runs a Python program and shows what it prints"}


def tool_instructions(built_in: set[str], functions: dict) -> str:
    """How to call the tools, one line each (the built-ins' fixed text when there are only they)."""
    if not functions:
        return TOOL_INSTRUCTIONS
    lines = [_BUILT_IN_LINES[name] for name in sorted(built_in)]
    lines += [describe(name, fn) for name, fn in functions.items()]
    return ("You may use tools before you answer. Call one by writing it as shown below; you will see its output. "
            "When you know the answer, give it without a tool call.\nTools:\n" + "\n".join(lines))


class ToolUse:
    """The policy may call a tool in a turn: <calc>expression</calc> (calculate above),
    <python>code</python> (the program runs in the code sandbox, rewards/code.py; its output, or
    its error, is shown), or one of the user's own functions (tools: {name: "module:function"};
    call forms and the worker they run in: envs/tools.py). The environment answers with the
    first call's result ("Output: ..."); a turn without a call is the final answer, judged by
    the run's reward. An episode that runs out of turns while still calling tools earns 0.
    info: tool_calls (calls made), tool_errors (calls refused, written wrong or raising),
    tool_timeouts (calls stopped at timeout_s), correct (the final answer's 0/1).
    base_dir (given by aha: the config's folder) is where a tool's file path is looked up."""

    def __init__(self, reward, tools: list[str] | dict = ("calc", "python"), instructions: str | None = None,
                 correct_min: float = 1.0, timeout_s: float = 5.0, max_output: int = 500, base_dir: str = "."):
        self.built_in, self.functions = user_tools(tools, base_dir)
        if "python" in self.built_in:
            _check_sandbox()
        self.targets = dict(tools) if isinstance(tools, dict) else {}
        self.instructions = tool_instructions(self.built_in, self.functions) if instructions is None else instructions
        self.tool_schemas = [schema(name, fn) for name, fn in self.functions.items()] or None
        self.reward, self.base_dir = reward, str(base_dir)
        self.correct_min, self.timeout_s, self.max_output = correct_min, timeout_s, max_output
        self.sample: dict = {}
        self.counts = {"tool_calls": 0.0, "tool_errors": 0.0, "tool_timeouts": 0.0}

    def reset(self, sample: dict):
        self.sample = sample
        self.counts = dict.fromkeys(self.counts, 0.0)
        prompt = sample["prompt"]
        if not self.instructions:
            return prompt
        if isinstance(prompt, list):  # the instructions join the question in its user message
            if check_prompt(prompt, "prompt") is not None:
                return prompt
            return prompt[:-1] + [{"role": "user", "content": f"{prompt[-1]['content']}\n\n{self.instructions}"}]
        return f"{prompt}\n\n{self.instructions}"

    def run(self, tool: str, code: str) -> ToolResult:
        """A built-in tool's output."""
        if tool == "calc":
            output = calculate(code)
            return ToolResult(output, "error" if output.startswith("error:") else "ok")
        from aha.rewards.code import SandboxLimits, run_program

        printed, error = run_program(code.strip("\n"), limits=SandboxLimits(wall_s=self.timeout_s + 5,
                                                                            test_s=self.timeout_s))
        out = printed if error is None else f"{printed}{error}"
        status = "ok" if error is None else "error"
        return ToolResult(out.strip()[-self.max_output:] or "(no output)", status)

    def call(self, call: ToolCall) -> ToolResult:
        if call.error is not None:
            return ToolResult(call.error, "error")
        if call.name in self.functions:
            return run_user_tool(call.name, self.targets[call.name], self.functions[call.name], call, self.base_dir,
                                 self.timeout_s)
        if call.name not in self.built_in:
            return ToolResult(f"error: the {call.name} tool is not available", "error")
        text = call.arguments
        if isinstance(text, dict):  # <tool_call>{"name": "calc", "arguments": {"expression": "2 * 3"}}</tool_call>
            text = str(next(iter(text.values()))) if len(text) == 1 else json.dumps(text)
        return self.run(call.name, text)

    def step(self, action: str) -> Turn:
        call = find_call(action, set(BUILT_IN_TOOLS) | set(self.functions))
        if call is not None:
            result = self.call(call)
            self.counts["tool_calls"] += 1
            self.counts["tool_errors"] += result.status == "error"
            self.counts["tool_timeouts"] += result.status == "timeout"
            output = result.output if len(result.output) <= self.max_output else result.output[:self.max_output] + "..."
            return Turn(0.0, False, f"Output: {output}", role="tool", info=dict(self.counts))
        score, right = _judge(self.reward, action, self.sample, self.correct_min)
        return Turn(score, True, info={**self.counts, "correct": float(right)})


BUILT_IN_ENVIRONMENTS = {"try_again": TryAgain, "tool_use": ToolUse}
