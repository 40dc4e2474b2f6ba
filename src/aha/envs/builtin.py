"""Built-in environments: try_again (answer, hear that it is wrong, answer again) and
tool_use (call a calculator or a sandboxed Python tool, read its output, then answer)."""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
from fractions import Fraction

from aha.envs.base import Turn
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
_CALL = re.compile(r"<(calc|python)>(.*?)(?:</\1>|$)", re.DOTALL)


class ToolUse:
    """The policy may call a tool in a turn: <calc>expression</calc> (calculate above) or
    <python>code</python> (the program runs in the code sandbox, rewards/code.py; its output, or
    its error, is shown). The environment answers with the first call's result
    ("Output: ..."); a turn without a call is the final answer, judged by the run's reward.
    An episode that runs out of turns while still calling tools earns 0.
    info: tool_calls (calls made), correct (the final answer's 0/1)."""

    def __init__(self, reward, tools: list[str] = ("calc", "python"), instructions: str = TOOL_INSTRUCTIONS,
                 correct_min: float = 1.0, timeout_s: float = 5.0, max_output: int = 500):
        unknown = sorted(set(tools) - {"calc", "python"})
        if unknown:
            raise ValueError(f"env.options.tools: unknown tool(s) {unknown} (known: calc, python)")
        if "python" in tools:
            _check_sandbox()
        self.reward, self.tools, self.instructions = reward, set(tools), instructions
        self.correct_min, self.timeout_s, self.max_output = correct_min, timeout_s, max_output
        self.sample: dict = {}
        self.calls = 0

    def reset(self, sample: dict):
        self.sample, self.calls = sample, 0
        prompt = sample["prompt"]
        if not self.instructions:
            return prompt
        if isinstance(prompt, list):  # the instructions join the question in its user message
            if check_prompt(prompt, "prompt") is not None:
                return prompt
            return prompt[:-1] + [{"role": "user", "content": f"{prompt[-1]['content']}\n\n{self.instructions}"}]
        return f"{prompt}\n\n{self.instructions}"

    def run(self, tool: str, code: str) -> str:
        if tool not in self.tools:
            return f"error: the {tool} tool is not available"
        if tool == "calc":
            return calculate(code)
        from aha.rewards.code import SandboxLimits, run_program

        printed, error = run_program(code.strip("\n"), limits=SandboxLimits(wall_s=self.timeout_s + 5,
                                                                            test_s=self.timeout_s))
        out = printed if error is None else f"{printed}{error}"
        return out.strip()[-self.max_output:] or "(no output)"

    def step(self, action: str) -> Turn:
        call = _CALL.search(action)
        if call is not None:
            self.calls += 1
            return Turn(0.0, False, f"Output: {self.run(call.group(1), call.group(2))}",
                        info={"tool_calls": float(self.calls)})
        score, right = _judge(self.reward, action, self.sample, self.correct_min)
        return Turn(score, True, info={"tool_calls": float(self.calls), "correct": float(right)})


BUILT_IN_ENVIRONMENTS = {"try_again": TryAgain, "tool_use": ToolUse}
