"""Drop repetition that carries no content: the second stage of every mode after ``off``.

Rules (each keeps the first occurrence):

- running headers and footers: a line with a page marker ("Page 2 of 3") whose text
  recurs with other page numbers is pagination, not content; all such lines go, and
  so do lines that are only a page marker;
- a sentence repeated right after itself in the same line ("Happy cycling! Happy
  cycling!") is said once;
- a paragraph or line that repeats an earlier one word for word goes when it can
  stand on its own: when it is long (at least ``SELF_CONTAINED_WORDS`` words), comes
  straight after its twin, or carries no number, price or date and recurs
  ``BOILERPLATE_REPEATS`` times or more (navigation, buttons, slogans).

A short line holding a fact ("Price: £5") is never dropped as a duplicate unless it
follows its twin immediately: under another heading it may state another item's price.
Table rows only go right after their twin (two tables share a header row). Code is
never touched.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Final

from reame.gateway.compress.segment import Kind, Line, is_table_row, join, sentences, split_lines

SELF_CONTAINED_WORDS: Final = 8
BOILERPLATE_REPEATS: Final = 3

_PAGE: Final = re.compile(r"\bpage\s+\d{1,4}(?:\s*(?:of|/)\s*\d{1,4})?\b", re.I)
_PAGE_ONLY: Final = re.compile(r"^\W*(?:page\s+)?\d{1,4}\s*(?:of|/)\s*\d{1,4}\W*$|^\W*page\s+\d{1,4}\W*$", re.I)
_WORD: Final = re.compile(r"\w+")
_FACT_MARK: Final = re.compile(r"[0-9$€£¥₹%@]")


def dedupe(text: str) -> str:
    """Apply every repetition rule to normalised ``text``."""
    lines = split_lines(text)
    lines = drop_pagination(lines)
    lines = [_once_per_line(line) for line in lines]
    lines = drop_repeated_paragraphs(lines)
    return join(drop_repeated_lines(lines))


def drop_pagination(lines: list[Line]) -> list[Line]:
    """Remove running headers/footers that differ only in their page number, and bare page markers."""
    keys = Counter(_page_key(line.text) for line in lines if _PAGE.search(line.text))
    kept = []
    for line in lines:
        running = _PAGE.search(line.text) is not None and keys[_page_key(line.text)] > 1
        if line.kind is not Kind.CODE and (running or _PAGE_ONLY.match(line.text)):
            continue
        kept.append(line)
    return kept


def _page_key(text: str) -> str:
    return _PAGE.sub("page #", text).strip()


def _once_per_line(line: Line) -> Line:
    if line.kind in (Kind.CODE, Kind.BLANK):
        return line
    parts = sentences(line.text)
    kept = [s for i, s in enumerate(parts) if i == 0 or s != parts[i - 1]]
    if len(kept) == len(parts):
        return line
    return Line(" ".join(kept), line.kind, line.level)


def drop_repeated_paragraphs(lines: list[Line]) -> list[Line]:
    """Remove a multi-line paragraph that repeats an earlier one and can stand on its own."""
    paragraphs: list[list[Line]] = [[]]
    for line in lines:
        if line.kind is Kind.BLANK:
            paragraphs.append([])
        else:
            paragraphs[-1].append(line)
    seen: set[tuple[str, ...]] = set()
    kept: list[Line] = []
    for paragraph in paragraphs:
        key = tuple(line.text for line in paragraph)
        words = sum(len(_WORD.findall(line.text)) for line in paragraph)
        code = any(line.kind is Kind.CODE for line in paragraph)
        if len(paragraph) > 1 and key in seen and words >= SELF_CONTAINED_WORDS and not code:
            continue
        seen.add(key)
        kept.extend(paragraph)
        kept.append(Line("", Kind.BLANK))
    return kept


def drop_repeated_lines(lines: list[Line]) -> list[Line]:
    """Remove lines that repeat an earlier line and can stand on their own (see the module doc)."""
    counts = Counter(line.text for line in lines if line.kind not in (Kind.BLANK, Kind.CODE))
    seen: set[str] = set()
    kept: list[Line] = []
    previous = ""
    for line in lines:
        if line.kind is Kind.BLANK:
            kept.append(line)
            continue
        text = line.text
        if line.kind is not Kind.CODE and text in seen and _redundant(text, previous, counts[text]):
            continue
        seen.add(text)
        kept.append(line)
        previous = text
    return kept


def _redundant(text: str, previous: str, count: int) -> bool:
    if text == previous:
        return True
    if is_table_row(text):  # a header or row of another table
        return False
    if len(_WORD.findall(text)) >= SELF_CONTAINED_WORDS:
        return True
    return count >= BOILERPLATE_REPEATS and not _FACT_MARK.search(text)
