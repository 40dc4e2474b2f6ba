"""Plain data across the sandbox's pipe: values are written as Python literals and read back
by a strict decoder that builds only builtin values (ints, floats with inf and nan, complex,
str, bytes, bool, None, tuples, lists, dicts, sets, frozensets) and the standard library's
exact numbers (Fraction, Decimal). Nothing the candidate sends can run code or lie about
equality on the harness side: the harness compares its own objects.

Standard library only: the sandbox runner imports this file inside the sandbox.
"""

import ast
import math
from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from decimal import Decimal
from fractions import Fraction

MAX_LITERAL = 8 << 20  # characters; a longer value is refused, not parsed


class CodecError(ValueError):
    """A value that cannot cross the pipe as plain data."""


_BASES = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def _as_builtin(value):
    """The builtin value behind a subclass (Counter, namedtuple, IntEnum) or a numpy scalar or
    array. Called where the value lives: in the sandbox for results, which is safe, since the
    other side builds its own objects from the literal and never sees this one."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (KeysView, ItemsView)):  # compare like sets
        return set(value)
    if isinstance(value, (Iterator, ValuesView, range)):  # generators, map, zip, reversed, ...
        return list(value)
    if isinstance(value, Fraction):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, Decimal):
        return Decimal(str(value))
    for base in _BASES:
        if isinstance(value, base):
            if base in (int, float, str):
                return getattr(base, {int: "__int__", float: "__float__", str: "__str__"}[base])(value)
            return base(value)
    raise CodecError(f"a {type(value).__name__} cannot be sent as plain data")


def encode(value, depth: int = 0) -> str:
    """A literal for `value`, written from builtin types only. A subclass or numpy value is
    first converted to its builtin equivalent, so the literal carries data, never behaviour
    (an overridden __eq__ or __repr__ does not cross)."""
    if depth > 100:
        raise CodecError("nested more than 100 levels")
    kind = type(value)
    if kind is int:
        return repr(value) if abs(value).bit_length() < 10_000 else hex(value)  # str() of huge ints is refused
    if value is None or kind in (bool, str, bytes):
        return repr(value)
    if kind is Fraction:
        return f"Fraction({encode(value.numerator)}, {encode(value.denominator)})"
    if kind is Decimal:
        return f"Decimal({str(value)!r})"
    if kind is float:
        return repr(value) if math.isfinite(value) else ("nan" if value != value else "inf" if value > 0 else "-inf")
    if kind is complex:
        return f"complex({encode(value.real, depth + 1)}, {encode(value.imag, depth + 1)})"
    if kind in (list, tuple, set, frozenset):
        items = [encode(item, depth + 1) for item in value]
        if kind is list:
            return "[" + ", ".join(items) + "]"
        if kind is tuple:
            return "(" + "".join(item + ", " for item in items) + ")"
        return f"{kind.__name__}([" + ", ".join(items) + "])"
    if kind is dict:
        return "{" + ", ".join(f"{encode(k, depth + 1)}: {encode(v, depth + 1)}" for k, v in value.items()) + "}"
    return encode(_as_builtin(value), depth + 1)


_NAMES = {"inf": math.inf, "nan": math.nan}
_CONTAINERS = {"set": set, "frozenset": frozenset}


def decode(text: str, limit: int = MAX_LITERAL):
    """The value of a literal written by `encode`; CodecError for anything else."""
    if not isinstance(text, str) or len(text) > limit:
        raise CodecError("not a literal of at most %d characters" % limit)
    try:
        tree = ast.parse(text, mode="eval").body
        return _build(tree)
    except CodecError:
        raise
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as err:
        raise CodecError(f"not a plain literal: {type(err).__name__}") from None


def _build(node):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float, complex, str, bytes, bool, type(None)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _build(node.operand)
        if type(operand) not in (int, float, complex):
            raise CodecError("a sign on a non-number")
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.Tuple):
        return tuple(_build(item) for item in node.elts)
    if isinstance(node, ast.List):
        return [_build(item) for item in node.elts]
    if isinstance(node, ast.Set):
        return {_build(item) for item in node.elts}
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise CodecError("** in a dict literal")
        return {_build(k): _build(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [_build(arg) for arg in node.args]
        if node.func.id in _CONTAINERS and len(args) <= 1 and all(type(a) in (list, tuple) for a in args):
            # item by item from Python, so a test's deadline can interrupt a set built from
            # colliding hashes (a C constructor over the whole list could not be)
            return _CONTAINERS[node.func.id](item for item in (args[0] if args else ()))
        if node.func.id == "complex" and len(args) == 2 and all(type(a) is float for a in args):
            return complex(*args)
        if node.func.id == "Fraction" and len(args) == 2 and all(type(a) is int for a in args) and args[1]:
            return Fraction(*args)
        if node.func.id == "Decimal" and len(args) == 1 and type(args[0]) is str and len(args[0]) < 10_000:
            return Decimal(args[0])
    raise CodecError(f"{type(node).__name__} is not plain data")
