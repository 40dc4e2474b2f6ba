"""Decimals in math answers, as Math-Verify's own tests read them.

- A rounded decimal: "0.33" for 1/3, "2.6667" for 8/3. math-verify compares floats at 6
  decimals by default, so 0.333333 already equals 1/3; a completion that writes d < 6 decimals
  (d >= 2) is compared at d decimals -- only when the reference holds a fraction with no finite
  decimal expansion (1/3, 8/3; not 1/8 = 0.125, not a decimal reference), so "0.13" never
  equals 0.125. The most decimals written set d: writing more only makes it stricter.
- A decimal comma in a bare reference: "1,22" (one comma, one or two digits after it) is read
  both as the list {1, 22} and as 1.22; "1,220" stays a thousands separator."""

from __future__ import annotations

import re

MIN_DECIMALS, DEFAULT_DECIMALS = 2, 6  # math-verify's default float_rounding is 6
_DECIMAL_DIGITS = re.compile(r"\d\.(\d+)")  # each digit run after a point is scanned once: linear
_DECIMAL_COMMA = re.compile(r"-?\d+,\d{1,2}")


def written_decimals(texts: list[str]) -> int:
    """The most digits after a decimal point in any number of the texts (0 without one)."""
    return max((len(m.group(1)) for text in texts for m in _DECIMAL_DIGITS.finditer(text)), default=0)


def _has_no_finite_decimal(values: list) -> bool:
    """True when a value holds a fraction whose denominator has a prime other than 2 and 5 (1/3,
    8/3) and no float: a reference written as a decimal is matched exactly, not rounded."""
    from sympy import Float, Rational, factorint

    atoms = [a for v in values if hasattr(v, "atoms") for a in v.atoms(Rational, Float)]
    if any(isinstance(a, Float) for a in atoms):
        return False
    return any(not a.is_Integer and set(factorint(int(a.q))) - {2, 5} for a in atoms)


def equal_when_rounded(gold: list, predicted: list, timeout_seconds: int) -> bool:
    """The prediction equals the reference rounded to the decimals it writes (see the module)."""
    from math_verify import verify

    digits = written_decimals([p for p in predicted if isinstance(p, str)])
    if not MIN_DECIMALS <= digits < DEFAULT_DECIMALS or not _has_no_finite_decimal(gold):
        return False
    return bool(verify(gold, predicted, float_rounding=digits, timeout_seconds=timeout_seconds))


def decimal_comma_reading(reference: str) -> str | None:
    """"1.22" for a bare reference "1,22"; None for anything else."""
    text = reference.strip()
    return text.replace(",", ".") if _DECIMAL_COMMA.fullmatch(text) else None
