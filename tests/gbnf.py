"""A small GBNF matcher for unit tests: does a grammar the gateway wrote accept a text?

It reads the subset gateway.grammar.schema_gbnf and gateway.api.tool_calls write (one rule a line;
literals, character classes, groups, rule names, ``? * + {m,n}``) and matches by
backtracking, so it is for short texts only. The real check is llama.cpp's, in the
integration tests; this one lets pure tests say what a grammar allows.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Iterator

Node = tuple[object, ...]

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-", "^": "^", "/": "/"}


@dataclasses.dataclass
class _Reader:
    text: str
    at: int = 0

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def blanks(self) -> None:
        while self.peek() in (" ", "\t"):
            self.at += 1

    def char(self) -> str:
        c = self.text[self.at]
        self.at += 1
        if c != "\\":
            return c
        e = self.text[self.at]
        self.at += 1
        if e in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[e]
            code = int(self.text[self.at:self.at + width], 16)
            self.at += width
            return chr(code)
        return _ESCAPES[e]


def _alternatives(r: _Reader) -> Node:
    options = [_sequence(r)]
    while r.peek() == "|":
        r.at += 1
        options.append(_sequence(r))
    return ("alt", options)


def _sequence(r: _Reader) -> Node:
    items: list[Node] = []
    while True:
        r.blanks()
        c = r.peek()
        if c in ("", "|", ")"):
            return ("seq", items)
        if c == '"':
            r.at += 1
            text = ""
            while r.peek() != '"':
                text += r.char()
            r.at += 1
            item: Node = ("lit", text)
        elif c == "[":
            r.at += 1
            negated = r.peek() == "^"
            r.at += negated
            ranges = []
            while r.peek() != "]":
                low = r.char()
                high = low
                if r.peek() == "-" and r.text[r.at + 1] != "]":
                    r.at += 1
                    high = r.char()
                ranges.append((low, high))
            r.at += 1
            item = ("class", negated, ranges)
        elif c == "(":
            r.at += 1
            item = _alternatives(r)
            r.blanks()
            r.at += 1  # ")"
        else:
            name = re.match(r"[\w-]+", r.text[r.at:])
            assert name, r.text[r.at:]
            r.at += len(name.group())
            item = ("ref", name.group())
        quantifier = re.match(r"[?*+]|\{(\d+)(,(\d*))?\}", r.text[r.at:])
        if quantifier:
            r.at += len(quantifier.group())
            q = quantifier.group()
            low, high = {"?": (0, 1), "*": (0, None), "+": (1, None)}.get(q, (None, None))
            if low is None:
                low = int(quantifier.group(1))
                high = low if quantifier.group(2) is None else (int(quantifier.group(3)) if quantifier.group(3)
                                                               else None)
            item = ("rep", item, low, high)
        items.append(item)


def parse(grammar: str) -> dict[str, Node]:
    rules = {}
    for line in grammar.splitlines():
        if line.strip():
            name, body = line.split(" ::= ", 1)
            rules[name.strip()] = _alternatives(_Reader(body))
    return rules


def accepts(grammar: str, text: str, root: str = "root") -> bool:
    """True if ``text`` is a whole sentence of ``grammar`` from ``root``."""
    rules = parse(grammar)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    return any(end == len(text) for end in _match(rules, rules[root], text, 0))


def _match(rules: dict[str, Node], node: Node, text: str, at: int) -> Iterator[int]:
    kind = node[0]
    if kind == "alt":
        for option in node[1]:
            yield from _match(rules, option, text, at)
    elif kind == "seq":
        yield from _sequence_ends(rules, node[1], 0, text, at)
    elif kind == "lit":
        if text.startswith(node[1], at):
            yield at + len(node[1])
    elif kind == "class":
        if at < len(text) and _in_class(node, text[at]):
            yield at + 1
    elif kind == "ref":
        yield from _match(rules, rules[node[1]], text, at)
    else:
        yield from _repeat(rules, node, 0, text, at)


def _in_class(node: Node, c: str) -> bool:
    inside = any(low <= c <= high for low, high in node[2])
    return inside != node[1]


def _sequence_ends(rules: dict[str, Node], items: list[Node], i: int, text: str, at: int) -> Iterator[int]:
    if i == len(items):
        yield at
        return
    for end in _match(rules, items[i], text, at):
        yield from _sequence_ends(rules, items, i + 1, text, end)


def _repeat(rules: dict[str, Node], node: Node, done: int, text: str, at: int) -> Iterator[int]:
    _, item, low, high = node
    if isinstance(item, tuple) and item[0] == "class":  # one character each: no recursion
        end = at
        while (high is None or done + end - at < high) and end < len(text) and _in_class(item, text[end]):
            end += 1
        for stop in range(end, at - 1, -1):
            if done + stop - at >= low:
                yield stop
        return
    if done >= low:
        yield at
    if high is not None and done >= high:
        return
    for end in _match(rules, item, text, at):
        if end > at:
            yield from _repeat(rules, node, done + 1, text, end)
