"""Cut a client's text into the pieces whose KV state is reused wherever they sit (cache.chunks).

A retriever sends the same documents in other orders and company for every
question, so a piece must be cut the same way whatever precedes or follows it:
every cut is decided from the paragraph before it alone. Text is cut after each
long paragraph (LONG_PARAGRAPH characters or more, its break excluded); short ones
(headings, list items, a title's lines) stay with the paragraph after them, so a
heading is read with the text it heads and a document's pieces are about as many
as its long paragraphs. A document then keeps its pieces wherever it is put, but
for short paragraphs at its end, which join the next text's first piece; and the
pieces of any text join back to it exactly.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Final

# A paragraph this long (characters, its break excluded) ends a piece: about 80 tokens of
# English, more than a stored block (cache.block_tokens).
LONG_PARAGRAPH: Final = 320
# A blank line and any blank lines after it: the break stays with the paragraph before.
_BREAK: Final = re.compile(r"\n[ \t]*\n\s*")


def pieces(text: str) -> list[str]:
    """Return ``text`` cut after each of its long paragraphs (and the blank lines after it)."""
    out: list[str] = []
    start = paragraph = 0  # where the current piece and its last paragraph begin
    for match in _BREAK.finditer(text):
        if match.end() == len(text):
            break  # trailing blank lines end the last piece
        if match.start() - paragraph >= LONG_PARAGRAPH:
            out.append(text[start : match.end()])
            start = match.end()
        paragraph = match.end()
    if start < len(text):
        out.append(text[start:])
    return out


def part_breaks(parts: Sequence[str]) -> tuple[int, ...]:
    """Return where each of ``parts`` after the first begins in their concatenation (empty parts: no break)."""
    breaks: list[int] = []
    at = 0
    for part in parts:
        if part and at:
            breaks.append(at)
        at += len(part)
    return tuple(breaks)


def split_at(text: str, breaks: Sequence[int]) -> list[str]:
    """Return ``text`` cut at ``breaks`` (offsets, ascending); breaks outside the text are ignored."""
    cuts = [0, *(b for b in breaks if 0 < b < len(text)), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(cuts) if b > a]
