"""Cut a client's text into the pieces whose KV state is reused wherever they sit (cache.chunks).

A retriever sends the same documents in other orders and company for every
question, so a piece must be cut the same way whatever precedes or follows it:
every cut is decided from the two paragraphs beside it alone. Text is cut at each
paragraph break (a blank line) but those between two short paragraphs (under
LONG_PARAGRAPH characters: headings, list items, signature lines), so a long
paragraph is a piece of its own and a run of short ones is one piece. A document
then keeps its pieces wherever it is put, but for a run of short paragraphs where
it meets its neighbour; and the pieces of any text join back to it exactly.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Final

# A paragraph this long (characters, its break excluded) is a piece of its own: about 80
# tokens of English, more than a stored block (cache.block_tokens).
LONG_PARAGRAPH: Final = 320
# A blank line and any blank lines after it: the break stays with the paragraph before.
_BREAK: Final = re.compile(r"\n[ \t]*\n\s*")


def pieces(text: str) -> list[str]:
    """Return ``text`` cut at its paragraph breaks, but where both paragraphs beside a break are short."""
    out: list[str] = []
    start = paragraph = 0  # where the current piece and its last paragraph begin
    short = False  # whether the paragraph before the break is short
    for match in _BREAK.finditer(text):
        if match.end() == len(text):
            break  # trailing blank lines end the last piece
        this_short = match.start() - paragraph < LONG_PARAGRAPH
        if paragraph > start and not (short and this_short):
            out.append(text[start:paragraph])
            start = paragraph
        short, paragraph = this_short, match.end()
    if paragraph > start and not (short and len(text) - paragraph < LONG_PARAGRAPH):
        out.append(text[start:paragraph])
        start = paragraph
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
