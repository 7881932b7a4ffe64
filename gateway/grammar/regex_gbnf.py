"""Translate a JSON Schema ``pattern`` into a GBNF rule body for the string's JSON text.

A grammar can only promise what it spells out, so this takes Python's own regex
parser (``re._parser``, the one ``jsonschema`` matches with) and translates the
parsed tree node by node; anything it cannot translate exactly is a
:class:`PatternError`, never a looser grammar. The output is the JSON *encoding* of
the string, so the translation works on decoded characters and writes each one as
JSON spells it. Character classes and ``.`` leave out ``"``, ``\\`` and control
characters (which JSON would have to escape): that narrows what may be generated,
and every string generated still matches the pattern.

JSON Schema patterns are not anchored (a match anywhere counts): a pattern without
``^`` gets any characters before it, one without ``$`` any characters after it.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from typing import Any, Final

_parser: Any = importlib.import_module("re._parser")  # typeshed has no stub for it
_c: Any = importlib.import_module("re._constants")

MAX_REPEAT: Final = 1000  # GBNF expands {m,n} into rules: bound the grammar's size, nesting included
MAX_CODE_POINT: Final = 0x10FFFF
# Code points a JSON string must escape; classes and "." never produce them.
_FORBIDDEN: Final = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F))
_ANY: Final = "[^\\x00-\\x1F\\x22\\x5C\\x7F]"
_ALLOWED_FLAGS: Final = 32  # re.UNICODE, which every str pattern has
_CATEGORIES: Final[dict[Any, tuple[tuple[int, int], ...]]] = {
    _c.CATEGORY_DIGIT: ((0x30, 0x39),),
    _c.CATEGORY_WORD: ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    _c.CATEGORY_SPACE: ((0x20, 0x20),),  # the one white space JSON writes unescaped
}


class PatternError(ValueError):
    """A pattern this translation cannot enforce exactly."""


def pattern_rule(pattern: str) -> str:
    """Return a GBNF expression for the JSON text (quotes included) of strings matching ``pattern``."""
    try:
        parsed = _parser.parse(pattern)
    except Exception as err:  # re.error, and the parser's own recursion limits
        raise PatternError(f"not a valid regular expression: {err}") from err
    if parsed.state.flags & ~_ALLOWED_FLAGS:
        raise PatternError("inline flags such as (?i) are not supported")
    items = list(parsed)
    head = bool(items) and items[0] == (_c.AT, _c.AT_BEGINNING)
    if head:
        items = items[1:]
    tail = bool(items) and items[-1][0] == _c.AT and items[-1][1] in (_c.AT_END, _c.AT_END_STRING)
    if tail:
        items = items[:-1]
    body = _sequence(items, 1)
    before = "" if head else f"{_ANY}* "
    after = "" if tail else f" {_ANY}*"
    return f'"\\"" {before}{body}{after} "\\"" space'


def _sequence(items: Iterable[tuple[Any, Any]], scale: int) -> str:
    """Translate a run of nodes; ``scale`` is how many times the enclosing repetitions repeat it."""
    parts = [_node(op, value, scale) for op, value in items]
    return "(" + " ".join(parts) + ")" if parts else '""'


def _node(op: Any, value: Any, scale: int) -> str:
    if op == _c.LITERAL:
        return _literal(chr(value))
    elif op == _c.ANY:
        return _ANY
    elif op == _c.IN:
        return _class(value)
    elif op == _c.NOT_LITERAL:
        return _class([(_c.NEGATE, None), (_c.LITERAL, value)])
    elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):  # lazy or greedy: the same set of strings
        low, high, sub = value
        if high == _c.MAXREPEAT and _ambiguous_repeat(list(sub)):
            raise PatternError(
                "a repetition of something that ends in an unbounded repetition of what it starts with, "
                "such as (a+)+ or (\\w+\\s?)+, is not supported: the grammar could split the same text in "
                "exponentially many ways; repeat the inner part once instead (a+)"
            )
        inner = scale * max(low, 1 if high == _c.MAXREPEAT else high)
        if inner > MAX_REPEAT:
            raise PatternError(f"repetitions that multiply to more than {MAX_REPEAT} are not supported")
        return _repeat(_sequence(sub, inner), low, high)
    elif op == _c.SUBPATTERN:
        _group, add_flags, del_flags, sub = value
        if add_flags or del_flags:
            raise PatternError("inline flags such as (?i:...) are not supported")
        return _sequence(sub, scale)
    elif op == _c.BRANCH:
        _unused, branches = value
        return "(" + " | ".join(_sequence(branch, scale) for branch in branches) + ")"
    elif op == _c.AT:
        raise PatternError("anchors (^, $, \\b) are supported only at the start and end of the pattern")
    else:
        raise PatternError(f"{str(op).lower()} (lookaround, backreference, ...) is not supported")


# -- ambiguity: what llama.cpp's grammar sampler pays for in parse stacks -------------------

_Ranges = list[tuple[int, int]]
_EVERYTHING: Final[_Ranges] = [(0, MAX_CODE_POINT)]


def _ambiguous_repeat(items: list[tuple[Any, Any]]) -> bool:
    """Tell whether repeating ``items`` without bound lets one text be split many ways.

    That is so when the sequence can end in an unbounded repetition whose characters
    the sequence can also start with: each such character may close one round or
    continue it ((a+)+ on "aaaa": 8 ways; the parser keeps them all). A delimiter
    between rounds (([a-z]+-)*) keeps the split unique and is translated as usual.
    """
    return _ends_in_repeat_of(items, _first(items))


def _ends_in_repeat_of(items: list[tuple[Any, Any]], starts: _Ranges) -> bool:
    """Tell whether ``items`` may end in an unbounded repetition of characters among ``starts``."""
    for op, value in reversed(items):
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT) and value[1] == _c.MAXREPEAT and _overlap(_first(list(value[2])),
                                                                                             starts):
            return True
        if op == _c.SUBPATTERN and _ends_in_repeat_of(list(value[3]), starts):
            return True
        if op == _c.BRANCH and any(_ends_in_repeat_of(list(branch), starts) for branch in value[1]):
            return True
        if not _nullable(op, value):
            return False
    return False


def _nullable(op: Any, value: Any) -> bool:
    """Tell whether a node may match the empty string (a conservative answer: only optional repeats)."""
    return op in (_c.MAX_REPEAT, _c.MIN_REPEAT) and value[0] == 0


def _first(items: list[tuple[Any, Any]]) -> _Ranges:
    """The characters a sequence may start with (a superset)."""
    ranges: _Ranges = []
    for op, value in items:
        if op == _c.LITERAL:
            ranges.append((value, value))
        elif op in (_c.ANY, _c.NOT_LITERAL) or (op == _c.IN and value and value[0][0] == _c.NEGATE):
            return _EVERYTHING
        elif op == _c.IN:
            for member, arg in value:
                if member == _c.LITERAL:
                    ranges.append((arg, arg))
                elif member == _c.RANGE:
                    ranges.append(arg)
                else:
                    ranges.extend(_CATEGORIES.get(arg, _EVERYTHING))
        elif op in (_c.MAX_REPEAT, _c.MIN_REPEAT):
            ranges.extend(_first(list(value[2])))
        elif op == _c.SUBPATTERN:
            ranges.extend(_first(list(value[3])))
        elif op == _c.BRANCH:
            for branch in value[1]:
                ranges.extend(_first(list(branch)))
        if not _nullable(op, value):
            break
    return ranges


def _overlap(a: _Ranges, b: _Ranges) -> bool:
    return any(lo1 <= hi2 and lo2 <= hi1 for lo1, hi1 in a for lo2, hi2 in b)


def _literal(char: str) -> str:
    """The GBNF literal of one decoded character, as JSON writes it."""
    encoded = json.dumps(char, ensure_ascii=False)[1:-1]
    return '"' + "".join(_escape_literal(c) for c in encoded) + '"'


def _escape_literal(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    if ord(char) < 0x20 or ord(char) == 0x7F:
        return f"\\x{ord(char):02X}"
    return char


def _repeat(body: str, low: int, high: int) -> str:
    unbounded = high == _c.MAXREPEAT
    if low > MAX_REPEAT or (not unbounded and high > MAX_REPEAT):
        raise PatternError(f"repetition counts above {MAX_REPEAT} are not supported")
    if unbounded:
        return f"{body}*" if low == 0 else f"{body}+" if low == 1 else f"{body}{{{low},}}"
    if (low, high) == (0, 1):
        return f"{body}?"
    return f"{body}{{{low}}}" if low == high else f"{body}{{{low},{high}}}"


def _class(members: list[tuple[Any, Any]]) -> str:
    negate = bool(members) and members[0][0] == _c.NEGATE
    ranges: list[tuple[int, int]] = []
    for op, value in members[1:] if negate else members:
        if op == _c.LITERAL:
            ranges.append((value, value))
        elif op == _c.RANGE:
            ranges.append(value)
        elif op == _c.CATEGORY and value in _CATEGORIES and not negate:
            ranges.extend(_CATEGORIES[value])
        else:
            raise PatternError("negated or Unicode-wide classes such as \\D, \\W, \\S are not supported")
    if negate:
        return "[^" + "".join(_class_range(r) for r in sorted(ranges) + list(_FORBIDDEN)) + "]"
    # A class naming '"' or '\\' may produce it, escaped as JSON escapes it.
    escaped = [_literal(c) for c in '"\\' if any(lo <= ord(c) <= hi for lo, hi in ranges)]
    allowed = _subtract(sorted(ranges), _FORBIDDEN)
    options = (["[" + "".join(_class_range(r) for r in allowed) + "]"] if allowed else []) + escaped
    if not options:
        raise PatternError("a character class holds only control characters")
    return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"


def _subtract(ranges: list[tuple[int, int]], cut: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Return ``ranges`` without the code points in ``cut``."""
    result = ranges
    for cut_lo, cut_hi in cut:
        kept: list[tuple[int, int]] = []
        for lo, hi in result:
            if hi < cut_lo or lo > cut_hi:
                kept.append((lo, hi))
                continue
            if lo < cut_lo:
                kept.append((lo, cut_lo - 1))
            if hi > cut_hi:
                kept.append((cut_hi + 1, hi))
        result = kept
    return result


def _class_range(bounds: tuple[int, int]) -> str:
    lo, hi = bounds
    return _class_char(lo) if lo == hi else f"{_class_char(lo)}-{_class_char(hi)}"


def _class_char(point: int) -> str:
    if chr(point).isalnum() and point < 0x80:
        return chr(point)
    return f"\\x{point:02X}" if point < 0x100 else f"\\u{point:04X}" if point < 0x10000 else f"\\U{point:08X}"
