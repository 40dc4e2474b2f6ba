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


def countdown(completion: str, sample: dict) -> float:
    """1.0 if the final answer is an expression that uses each of sample['numbers'] exactly
    once (and nothing else) with + - * / and parentheses and equals sample['target'].
    Around an "=", either side may be that expression."""
    def looks_like(line: str) -> bool:
        return bool(_NUMBER.search(line)) and any(op in line for op in "+-*/×÷")

    text = _answer_text(completion, looks_like)
    for side in (text or "").split("="):  # "expr = target" or "target = expr"
        result = evaluate_expression(side)
        if result is not None and result[0] == sample["target"] and Counter(result[1]) == Counter(sample["numbers"]):
            return 1.0
    return 0.0


def yes_no(completion: str, sample: dict) -> float:
    """1.0 if the answer is sample['answer'] ("yes" or "no"): the first yes / no word of the
    stated final answer, else of the completion."""
    stated = final_answer(completion)
    for text in ([stated] if stated is not None else []) + [strip_hidden(completion)]:
        word = re.search(r"\b(yes|no)\b", text, flags=re.IGNORECASE)
        if word:
            return 1.0 if word.group(1).lower() == str(sample["answer"]).strip().lower() else 0.0
    return 0.0


def list_answer(completion: str, sample: dict) -> float:
    """1.0 if the final answer lists exactly the integers of sample['answer'] ("3, 5, 9" or a
    list), in that order."""
    want = sample["answer"] if isinstance(sample["answer"], list) else _NUMBER.findall(str(sample["answer"]))
    text = _answer_text(completion, lambda line: len(_NUMBER.findall(line)) >= 2)
    if text is None:
        return 0.0
    return 1.0 if [int(n) for n in _NUMBER.findall(text)] == [int(n) for n in want] else 0.0
