"""Split text for tokenizing, in linear time: at special-token text (``<|im_end|>``), and in chunks.

llama.cpp's own special-token pass (``llama_tokenize`` with ``parse_special``)
searches the rest of the whole text once per fragment and per special token, so a
text made of N special tokens costs O(N x length): 2 s for 200 KB of
``"<|im_end|>"``. Here the special texts become one regular expression shaped like
a trie (one branch per distinct next character), so a scan tries at most one branch
per character and backtracks at most the longest special's length: O(length x
longest special). At each position the longest special wins, and the scan goes on
after it, as llama.cpp does for specials that do not overlap (all chat markup does).

:func:`chunks` cuts a long text where a byte-level BPE pre-tokenizer cuts anyway
(between a letter and a space followed by a letter), so it can be tokenized piece by
piece, checking for cancel in between, with the same ids.

Pure: no llama.cpp here; the worker's model and the gateway's vocabulary list the
special tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

CHUNK_CHARS: Final = 1 << 16
# The pre-tokenizers of byte-level BPE vocabularies (GPT-2, Llama 3, Qwen, SmolLM...)
# all start a new piece at " word" after a letter, so no token spans this cut.
_CUT: Final = re.compile(r"(?<=[A-Za-z]) (?=[A-Za-z])")

# A trie node: next character -> child; "" marks the end of a special text.
_Trie = dict[str, "_Trie"]
_END: Final = ""


def _build(texts: list[str]) -> _Trie:
    root: _Trie = {}
    for text in texts:
        node = root
        for char in text:
            node = node.setdefault(char, {})
        node[_END] = {}
    return root


def _pattern(node: _Trie) -> str:
    """Return a regex matching the texts under ``node``, the longest first."""
    branches = [re.escape(char) + _pattern(child) for char, child in sorted(node.items()) if char != _END]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    # Greedy "?": a longer special is tried before the one ending here.
    return f"(?:{body})?" if _END in node else body


class SpecialSplitter:
    """Split text into plain runs and the ids of the special tokens written in it."""

    def __init__(self, specials: Mapping[str, int]) -> None:
        """Take special-token texts and their ids (empty texts are ignored)."""
        self._ids = {text: token for text, token in specials.items() if text}
        self._regex = re.compile(_pattern(_build(list(self._ids)))) if self._ids else None

    def split(self, text: str) -> Iterator[str | int]:
        """Yield ``text`` as non-empty plain strings and special-token ids, in order."""
        if self._regex is None:
            if text:
                yield text
            return
        start = 0
        for match in self._regex.finditer(text):
            if match.start() > start:
                yield text[start:match.start()]
            yield self._ids[match.group()]
            start = match.end()
        if start < len(text):
            yield text[start:]


def chunks(text: str, size: int = CHUNK_CHARS) -> Iterator[str]:
    """Yield ``text`` in pieces of about ``size`` characters, cut only at :data:`_CUT` (linear)."""
    start = 0
    while len(text) - start > size:
        cut = _CUT.search(text, start + size // 2)
        if cut is None:
            break
        yield text[start:cut.start()]
        start = cut.start()
    yield text[start:]
