"""GBNF for the JSON integers in a range, written digit by digit.

A grammar cannot compare numbers, but it can compare digit strings: the integers from 123 to 4567
are the 3-digit strings from 123 up, every 4-digit string below 4000, and 4000 to 4567, each of
which is a short chain of digit classes ("4" [0-4] [0-9] [0-9] | "45" [0-5] [0-9] | ...). That is
how llama.cpp's own converter enforces integer bounds; llama-cpp-python's converter has no bounds.
"""

from __future__ import annotations

import math
from numbers import Real

MAX_DIGITS = 16  # as the converter's own integer rule: beyond this an integer is no longer exact in a double


def integer_bounds(schema: dict) -> tuple[int | None, int | None]:
    """The smallest and largest integer a schema's minimum/maximum/exclusive* allow (None: no bound
    that a 16-digit integer could reach). Draft 4's boolean exclusiveMinimum/Maximum count too."""
    low = high = None
    for key, exclusive_key, rounding, step, keep in (
            ("minimum", "exclusiveMinimum", math.ceil, 1, max), ("maximum", "exclusiveMaximum", math.floor, -1, min)):
        candidates = []
        inclusive, exclusive = schema.get(key), schema.get(exclusive_key)
        if isinstance(exclusive, bool):  # draft 4: a flag on minimum/maximum
            inclusive, exclusive = (None, inclusive) if exclusive else (inclusive, None)
        if _finite(inclusive):
            candidates.append(rounding(inclusive))
        if _finite(exclusive):
            bound = rounding(exclusive)
            candidates.append(bound + step if bound == exclusive else bound)
        if candidates:
            value = keep(candidates)
            if abs(value) < 10 ** MAX_DIGITS:  # beyond what the grammar writes anyway: no bound
                if key == "minimum":
                    low = value
                else:
                    high = value
            elif (key == "minimum") == (value > 0):  # a bound no integer of the grammar meets
                low, high = 1, 0
    return low, high


def _finite(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def integer_range(low: int | None, high: int | None) -> str:
    """A GBNF expression for the decimal integers in [low, high] (None: open), as JSON writes them:
    no leading zeros, no "-0", at most MAX_DIGITS digits. Raise ValueError for an empty range."""
    if low is not None and high is not None and low > high:
        raise ValueError(f"no integer lies between {low} and {high}")
    parts = []
    if low is None or low < 0:  # the negative ones: "-" and a magnitude
        top = None if low is None else -low
        parts.append('"-" ' + _group(_naturals(max(1, -high) if high is not None and high < 0 else 1, top)))
    if high is None or high >= 0:
        parts.append(_naturals(max(0, low) if low is not None else 0, high))
    return _group(" | ".join(parts))


def _naturals(low: int, high: int | None) -> str:
    """The integers in [low, high] (low >= 0), grouped by their number of digits."""
    top = len(str(high)) if high is not None else max(MAX_DIGITS, len(str(low)))
    alternatives, full_from = [], None  # full_from: the first of a run of lengths taken whole
    for length in range(len(str(low)), top + 1):
        first = low if length == len(str(low)) else 10 ** (length - 1)
        last = high if high is not None and length == top else 10 ** length - 1
        if length > 1 and first == 10 ** (length - 1) and last == 10 ** length - 1:
            full_from = length if full_from is None else full_from
            continue
        if full_from is not None:
            alternatives.append(_whole_lengths(full_from, length - 1))
            full_from = None
        alternatives.append(_same_length(str(first), str(last)))
    if full_from is not None:
        alternatives.append(_whole_lengths(full_from, top))
    return " | ".join(alternatives)


def _whole_lengths(shortest: int, longest: int) -> str:
    """Every integer of `shortest` to `longest` digits."""
    return "[1-9] " + _digits(shortest - 1, longest - 1)


def _digits(fewest: int, most: int | None = None) -> str:
    most = fewest if most is None else most
    if most == 0:
        return ""
    if fewest == most:
        return "[0-9]" if most == 1 else f"[0-9]{{{most}}}"
    return f"[0-9]{{{fewest},{most}}}"


def _same_length(first: str, last: str) -> str:
    """The digit strings from `first` to `last`, both of one length."""
    if first == last:
        return f'"{first}"'
    common = len(_prefix(first, last))
    head = f'"{first[:common]}" ' if common else ""
    low, high, rest = int(first[common]), int(last[common]), len(first) - common - 1
    low_rest, high_rest = first[common + 1:], last[common + 1:]
    alternatives = []
    if set(low_rest) <= {"0"}:  # from low on, every suffix: low's digit joins the middle
        middle_low = low
    else:
        alternatives.append(f'"{low}" {_group(_at_least(low_rest))}')
        middle_low = low + 1
    middle_high = high if set(high_rest) <= {"9"} else high - 1
    if middle_low <= middle_high:
        alternatives.append(f"{_digit_class(middle_low, middle_high)} {_digits(rest)}".strip())
    if middle_high < high:
        alternatives.append(f'"{high}" {_group(_at_most(high_rest))}')
    return head + _group(" | ".join(alternatives))


def _prefix(a: str, b: str) -> str:
    n = 0
    while n < len(a) and a[n] == b[n]:
        n += 1
    return a[:n]


def _at_least(digits: str) -> str:
    """The digit strings of len(digits) that are >= digits."""
    if set(digits) <= {"0"}:
        return _digits(len(digits))
    first, rest = int(digits[0]), digits[1:]
    if not rest:
        return _digit_class(first, 9)
    tail = f'"{first}" {_group(_at_least(rest))}'
    return tail if first == 9 else f"{tail} | {_digit_class(first + 1, 9)} {_digits(len(rest))}"


def _at_most(digits: str) -> str:
    """The digit strings of len(digits) that are <= digits."""
    if set(digits) <= {"9"}:
        return _digits(len(digits))
    first, rest = int(digits[0]), digits[1:]
    if not rest:
        return _digit_class(0, first)
    tail = f'"{first}" {_group(_at_most(rest))}'
    return tail if first == 0 else f"{_digit_class(0, first - 1)} {_digits(len(rest))} | {tail}"


def _digit_class(low: int, high: int) -> str:
    return f"[{low}]" if low == high else f"[{low}-{high}]"


def _group(expression: str) -> str:
    expression = expression.strip()
    return expression if " " not in expression else f"({expression})"
