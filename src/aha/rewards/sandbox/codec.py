"""Plain data across the sandbox's pipe, as JSON with type tags: a JSON number, string, bool,
null or array is that value (an array is a list); a JSON object is always one tagged value:
{"t": [...]} tuple, {"s": [...]} set, {"fs": [...]} frozenset, {"d": [[k, v], ...]} dict
(keys of any plain type), {"b": "hex"} bytes, {"f": "inf" | "-inf" | "nan"} float,
{"i": "hex"} a big int, {"c": [re, im]} complex, {"q": [n, d]} Fraction, {"D": "1.5"} Decimal.

So tuples, sets, floats and None survive the trip (plain JSON would not keep them), and
the other side builds only builtin values from the tags: nothing sent can run code or lie
about equality. JSON is parsed in C (fast, bounded by the message size); the tags are turned
into values by a Python walk, which a test's deadline can interrupt.

Standard library only: the sandbox runner imports this file inside the sandbox.
"""

import math
from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from decimal import Decimal
from fractions import Fraction

MAX_DEPTH = 100
BIG_INT_BITS = 10_000  # past this an int travels as hex (decimal str() of huge ints is refused)
MAX_HEX_DIGITS = 1 << 16  # 256 Kbit: a Fraction's gcd of two such ints stays well under a second
MAX_DECIMAL_CHARS = 1 << 16


class CodecError(ValueError):
    """A value that cannot cross the pipe as plain data."""


_BASES = (bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset)


def _as_builtin(value):
    """The builtin value behind a subclass (Counter, namedtuple, IntEnum), a numpy scalar or
    array, an iterator or a dict view. Called where the value lives: in the sandbox for
    results, which is safe, since the other side builds its own objects from the data and
    never sees this one."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (Iterator, KeysView, ItemsView, ValuesView, range)):  # generators, map, zip, ...
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


def to_data(value, depth: int = 0):
    """`value` as JSON-able tagged data (see the module docstring)."""
    if depth > MAX_DEPTH:
        raise CodecError(f"nested more than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind in (bool, str):
        return value
    if kind is int:
        if value.bit_length() > 4 * MAX_HEX_DIGITS:
            raise CodecError(f"an int of {value.bit_length()} bits is past the {4 * MAX_HEX_DIGITS}-bit limit")
        return value if value.bit_length() < BIG_INT_BITS else {"i": hex(value)}
    if kind is float:
        return value if math.isfinite(value) else {"f": "nan" if value != value else "inf" if value > 0 else "-inf"}
    if kind is list:
        return [to_data(item, depth + 1) for item in value]
    if kind in (tuple, set, frozenset):
        return {{tuple: "t", set: "s", frozenset: "fs"}[kind]: [to_data(item, depth + 1) for item in value]}
    if kind is dict:
        return {"d": [[to_data(k, depth + 1), to_data(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [to_data(value.real, depth + 1), to_data(value.imag, depth + 1)]}
    if kind is Fraction:
        return {"q": [to_data(value.numerator, depth + 1), to_data(value.denominator, depth + 1)]}
    if kind is Decimal:
        text = str(value)
        if len(text) > MAX_DECIMAL_CHARS:
            raise CodecError(f"a Decimal of {len(text)} characters is past the {MAX_DECIMAL_CHARS} limit")
        return {"D": text}
    return to_data(_as_builtin(value), depth + 1)


def fits(value, budget: int) -> bool:
    """Whether `value` holds at most `budget` scalars, counted without converting anything
    (a 4-million-entry table is refused in microseconds instead of walked)."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > budget:
            return False
        if isinstance(item, dict):
            if len(item) > budget:
                return False
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            if len(item) > budget:
                return False
            stack.extend(item)
        elif isinstance(item, (str, bytes)) and len(item) > 8 * budget:
            return False
    return True


def from_data(data, depth: int = 0):
    """The value that `to_data` wrote; CodecError for anything else."""
    if depth > MAX_DEPTH:
        raise CodecError(f"nested more than {MAX_DEPTH} levels")
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [from_data(item, depth + 1) for item in data]
    if kind is not dict or len(data) != 1:
        raise CodecError("not tagged plain data")
    (tag, body), = data.items()
    try:
        if tag in ("t", "s", "fs") and type(body) is list:
            items = [from_data(item, depth + 1) for item in body]
            return tuple(items) if tag == "t" else {item for item in items} if tag == "s" else frozenset(items)
        if tag == "d" and type(body) is list:
            pairs = [(from_data(k, depth + 1), from_data(v, depth + 1)) for k, v in body]
            return {k: v for k, v in pairs}
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "f" and body in ("inf", "-inf", "nan"):
            return float(body)
        if tag == "i" and type(body) is str and len(body) <= MAX_HEX_DIGITS + 3:
            return int(body, 16)
        if tag == "c" and type(body) is list and len(body) == 2:
            real, imag = (from_data(part, depth + 1) for part in body)
            if type(real) in (int, float) and type(imag) in (int, float):
                return complex(real, imag)
        if tag == "q" and type(body) is list and len(body) == 2:
            numerator, denominator = (from_data(part, depth + 1) for part in body)
            if type(numerator) is int and type(denominator) is int and denominator:
                return Fraction(numerator, denominator)
        if tag == "D" and type(body) is str and len(body) <= MAX_DECIMAL_CHARS:
            return Decimal(body)
    except CodecError:
        raise
    except (TypeError, ValueError, ArithmeticError) as err:  # unhashable set items, bad hex, ...
        raise CodecError(f"not plain data: {type(err).__name__}") from None
    raise CodecError(f"not plain data: tag {str(tag)[:20]!r}")
