"""Decimals in math answers, as Math-Verify's own tests read them.

- A rounded decimal: "0.33" for 1/3, "2.6667" for 8/3. math-verify compares floats at 6
  decimals by default, so 0.333333 already equals 1/3; a completion that writes d < 6 decimals
  (d >= 2) is compared at d decimals -- only when the reference holds a fraction with no finite
  decimal expansion (1/3, 8/3; not 1/8 = 0.125, not a decimal reference), so "0.13" never
  equals 0.125, nor for a root or a constant (1.26 is not the cube root of 2). The most decimals
  written set d: writing more only makes it stricter; that number must keep 2 significant digits
  ("0.00" is no rounding of 1/300).
- A decimal comma in a bare reference: "1,22" (one comma, one or two digits after it) is read
  both as the list {1, 22} and as 1.22; "1,220" stays a thousands separator."""

from __future__ import annotations

import re

MIN_DECIMALS, DEFAULT_DECIMALS = 2, 6  # math-verify's default float_rounding is 6
_DECIMAL_DIGITS = re.compile(r"\d\.(\d+)")  # each digit run after a point is scanned once: linear
_DECIMAL_NUMBER = re.compile(r"(?<!\d)\d++\.\d++")  # entered at a run's start only: linear
_DECIMAL_COMMA = re.compile(r"-?\d+,\d{1,2}")


def written_decimals(texts: list[str]) -> int:
    """The most digits after a decimal point in any number of the texts (0 without one)."""
    return max((len(m.group(1)) for text in texts for m in _DECIMAL_DIGITS.finditer(text)), default=0)


def _significant(texts: list[str]) -> int:
    """The significant digits of the decimal written with the most places ("0.0033" has 2, "0.00"
    none): a rounding that keeps no digit of the value ("0.00" for 1/300) is no answer."""
    numbers = [m.group() for text in texts for m in _DECIMAL_NUMBER.finditer(text)]
    widest = max(numbers, key=lambda n: len(n.partition(".")[2]), default="")
    return len(widest.replace(".", "").lstrip("0"))


def _has_no_finite_decimal(values: list) -> bool:
    """True when a value is made of rational numbers only (no root, constant or function: 1.26 is
    not the cube root of 2) and holds a fraction whose denominator has a prime other than 2 and 5
    (1/3, 8/3) and no float: a reference written as a decimal is matched exactly, not rounded."""
    from sympy import Float, Function, NumberSymbol, Pow, Rational, Symbol, factorint

    if any(not hasattr(v, "atoms") or v.atoms(Function, NumberSymbol, Symbol)
           or any(not p.exp.is_Integer for p in v.atoms(Pow)) for v in values):
        return False
    atoms = [a for v in values for a in v.atoms(Rational, Float)]
    if any(isinstance(a, Float) for a in atoms):
        return False
    return any(not a.is_Integer and set(factorint(int(a.q))) - {2, 5} for a in atoms)


def equal_when_rounded(gold: list, predicted: list, timeout_seconds: int) -> bool:
    """The prediction equals the reference rounded to the decimals it writes (see the module)."""
    from math_verify import verify

    texts = [p for p in predicted if isinstance(p, str)]
    digits = written_decimals(texts)
    if not MIN_DECIMALS <= digits < DEFAULT_DECIMALS or _significant(texts) < MIN_DECIMALS \
            or not _has_no_finite_decimal([g for g in gold if not isinstance(g, str)]):
        return False
    return bool(verify(gold, predicted, float_rounding=digits, timeout_seconds=timeout_seconds))


def decimal_comma_reading(reference: str) -> str | None:
    """"1.22" for a bare reference "1,22"; None for anything else."""
    text = reference.strip()
    return text.replace(",", ".") if _DECIMAL_COMMA.fullmatch(text) else None
