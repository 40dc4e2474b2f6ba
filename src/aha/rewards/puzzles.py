"""Verifiers for the procedural tasks whose answers are not one number: a Countdown
expression, a yes / no answer, a list of numbers. Each reads the completion's final answer
(its last box, <answer> span or answer line; else the last line that could be one)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from fractions import Fraction

from aha.rewards.extract import final_answer, strip_hidden

_OPERATORS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
              ast.Div: lambda a, b: a / b}
_NUMBER = re.compile(r"-?\d+")
_MAX_EXPRESSION = 200  # characters: an answer, not a program


def _answer_text(completion: str, looks_like) -> str | None:
    """The stated final answer, else the last non-blank line that `looks_like` accepts."""
    stated = final_answer(completion)
    if stated is not None:
        return stated
    lines = [line.strip() for line in strip_hidden(completion).splitlines() if line.strip()]
    return next((line for line in reversed(lines) if looks_like(line)), None)


def evaluate_expression(text: str) -> tuple[Fraction, list[int]] | None:
    """(value, the numbers it uses) of an arithmetic expression of non-negative integers with
    + - * / and parentheses, computed exactly; None for anything else (names, calls, powers,
    unary signs, a division by zero, or more than 200 characters). Parsed with ast, never run."""
    text = text.replace("×", "*").replace("÷", "/").replace("−", "-").strip()
    if not text or len(text) > _MAX_EXPRESSION:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None
    numbers: list[int] = []

    def value(node) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= 0:
            numbers.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ZeroDivisionError
            return _OPERATORS[type(node.op)](left, right)
        raise ValueError(f"not allowed: {type(node).__name__}")

    try:
        return value(tree.body), numbers
    except (ValueError, ZeroDivisionError):
        return None


# a maximal run of expression characters holding a digit. It starts only where a run starts (the
# lookbehind) and reads to its first digit possessively: "[...]*\d[...]*" tried every position of
# a digitless run of spaces, each time to the run's end (quadratic)
_EXPRESSION_RUN = re.compile(r"(?<![\d\s+\-*/()])[\s+\-*/()]*+\d[\d\s+\-*/()]*+")
_LATEX = [("\\times", "*"), ("\\cdot", "*"), ("\\div", "/"), ("\\left", ""), ("\\right", ""), ("$", ""),
          ("\\[", ""), ("\\]", ""), ("\\(", ""), ("\\)", ""), ("**", " ")]


def _expression_text(text: str) -> str:
    """An answer side as an expression: LaTeX operators and delimiters and markdown bold
    undone, "x" between numbers read as a product, and the longest run of expression
    characters kept (words around it dropped)."""
    for latex, plain in _LATEX:
        text = text.replace(latex, plain)
    text = re.sub(r"(?<=[\d)])\s*[xX]\s*(?=[\d(])", "*", text)
    runs = [run.strip() for run in _EXPRESSION_RUN.findall(text)]
    return max(runs, key=len, default="")


def countdown(completion: str, sample: dict) -> float:
    """1.0 if the final answer is an expression that uses each of sample['numbers'] exactly
    once (and nothing else) with + - * / and parentheses and equals sample['target']: the
    expression alone, "expression = target" or "target = expression" (more sides, or a side
    that is neither, pay nothing)."""
    numbers, target = sample["numbers"], sample["target"]
    if not (isinstance(numbers, list) and all(type(n) is int for n in numbers) and type(target) is int):
        raise ValueError(f"countdown needs sample['numbers'] a list of integers and sample['target'] an integer, "
                         f"got {numbers!r} and {target!r}")

    def looks_like(line: str) -> bool:
        return bool(_NUMBER.search(line)) and any(op in line for op in "+-*/×÷")

    text = _answer_text(completion, looks_like)
    sides = [_expression_text(side) for side in (text or "").split("=")]
    if len(sides) == 2:  # one side the expression, the other the target itself
        sides = [a for a, b in (sides, sides[::-1]) if b.strip() == str(target)]
    if len(sides) != 1:
        return 0.0
    result = evaluate_expression(sides[0])
    return 1.0 if result is not None and result[0] == target and Counter(result[1]) == Counter(numbers) else 0.0


def yes_no(completion: str, sample: dict) -> float:
    """1.0 if the answer is sample['answer'] ("yes" or "no"): the last yes / no word of the
    stated final answer when there is one (a negated one, "the answer is not yes", states
    nothing), else of the completion (reasoning first, the verdict last)."""
    want = str(sample["answer"]).strip().lower()
    if want not in ("yes", "no"):
        raise ValueError(f"yes_no needs sample['answer'] 'yes' or 'no', got {sample['answer']!r}")
    stated = final_answer(completion)
    words = re.findall(r"\b(yes|no)\b", stated if stated is not None else strip_hidden(completion), flags=re.IGNORECASE)
    return 1.0 if words and words[-1].lower() == want else 0.0


def list_answer(completion: str, sample: dict) -> float:
    """1.0 if the final answer lists exactly the integers of sample['answer'] ("3, 5, 9" or a
    list), in that order."""
    want = sample["answer"] if isinstance(sample["answer"], list) else _NUMBER.findall(str(sample["answer"]))
    text = _answer_text(completion, lambda line: len(_NUMBER.findall(line)) >= 2)
    if text is None:
        return 0.0
    return 1.0 if [_integer(n) for n in _NUMBER.findall(text)] == [_integer(str(int(n))) for n in want] else 0.0


def _integer(digits: str) -> str:
    """An integer's canonical text ("-007" -> "-7", "-0" -> "0"): equal exactly when the integers
    are, with no int() of a completion's number (past 4,300 digits that raises ValueError)."""
    sign, digits = ("-", digits[1:]) if digits.startswith("-") else ("", digits)
    digits = digits.lstrip("0")
    return sign + digits if digits else "0"
