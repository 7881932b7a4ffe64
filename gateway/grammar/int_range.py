"""Spell "an integer from ``low`` to ``high``" as alternatives of digit classes.

JSON integers have no leading zeros, so a range is cut into runs of the same digit
count, and each run into prefixes with a free tail, the way a regex for a numeric
range is built by hand (llama.cpp's json-schema-to-grammar does the same). The
result is a list of alternatives, each a list of character classes (``"0-9"``,
``"5"``, ``"1-9"``) with a trailing ``*`` for "any number of these", rendered by
:func:`gbnf`; tests match that grammar against Python's integers directly.
"""

from __future__ import annotations

from typing import Final

Alternative = list[str]  # character classes in order: "-", "1-9", "0-9*"

DIGITS: Final = "0-9"


def int_range(low: int | None, high: int | None) -> list[Alternative]:
    """Return the alternatives matching exactly the integers in [low, high] (None: unbounded)."""
    if low is not None and high is not None and low > high:
        raise ValueError("the range is empty")
    alternatives: list[Alternative] = []
    if low is None or low < 0:
        # Negative numbers: "-" then a magnitude from max(1, -high) to -low.
        top = None if low is None else -low
        bottom = 1 if high is None or high >= 0 else -high
        alternatives += [["-", *alt] for alt in _non_negative(bottom, top)]
    if high is None or high >= 0:
        alternatives += _non_negative(max(low or 0, 0), high)
    return alternatives


def _non_negative(low: int, high: int | None) -> list[Alternative]:
    """The alternatives for low <= n <= high (high None: unbounded), 0 <= low."""
    alternatives: list[Alternative] = []
    width = len(str(low))
    top_width = width if high is None else len(str(high))
    for digits in range(width, top_width + 1):
        first = 0 if digits == 1 else 10 ** (digits - 1)
        last = 10**digits - 1
        start = max(low, first)
        end = last if high is None else min(high, last)
        if start <= end:
            alternatives += _same_width(str(start), str(end))
    if high is None:
        # Any number with more digits than the widest bounded run.
        alternatives.append(["1-9", *[DIGITS] * top_width, DIGITS + "*"])
    return alternatives


def _same_width(lo: str, hi: str) -> list[Alternative]:
    """The alternatives for lo <= n <= hi, both written with the same number of digits."""
    if len(lo) == 1:
        return [[_span(int(lo), int(hi))]]
    if lo[0] == hi[0]:
        return [[lo[0], *alt] for alt in _same_width(lo[1:], hi[1:])]
    rest = len(lo) - 1
    if lo[1:] == "0" * rest and hi[1:] == "9" * rest:  # whole decades: one class per digit
        return [[_span(int(lo[0]), int(hi[0])), *[DIGITS] * rest]]
    alternatives = [[lo[0], *alt] for alt in _same_width(lo[1:], "9" * rest)]
    if int(hi[0]) - int(lo[0]) > 1:
        alternatives.append([_span(int(lo[0]) + 1, int(hi[0]) - 1), *[DIGITS] * rest])
    alternatives += [[hi[0], *alt] for alt in _same_width("0" * rest, hi[1:])]
    return alternatives


def _span(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def gbnf(alternatives: list[Alternative]) -> str:
    """Render the alternatives as one GBNF expression."""
    return " | ".join(" ".join(_gbnf_class(item) for item in alt) for alt in alternatives)


def _gbnf_class(item: str) -> str:
    if item == "-":
        return '"-"'
    star = item.endswith("*")
    return f"[{item.rstrip('*')}]" + ("*" if star else "")

