"""Find special-token text (``<|im_end|>``) in a prompt in linear time.

llama.cpp's own special-token pass (``llama_tokenize`` with ``parse_special``)
searches the rest of the whole text once per fragment and per special token, so a
text made of N special tokens costs O(N x length): 2 s for 200 KB of
``"<|im_end|>"``. Here the special texts become one regular expression shaped like
a trie (one branch per distinct next character), so a scan tries at most one branch
per character and backtracks at most the longest special's length: O(length x
longest special). At each position the longest special wins, and the scan goes on
after it, as llama.cpp does for specials that do not overlap (all chat markup does).

Pure: no llama.cpp here; the worker's model lists its special tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

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
