"""Turn a stream of token pieces (bytes) into text deltas, honouring stop strings.

Pure logic, no model: the engine pushes each sampled token's piece and sends
whatever text comes back. Two things are held back until they are settled:

- bytes of a UTF-8 character split across tokens (an emoji is often four
  single-byte pieces), until the character is complete;
- a text tail that could be the beginning of a stop string, until the next
  pieces show whether it is one.

A stop string never leaks into the output, even when it spans several tokens.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable


class TextStream:
    """Decode pieces incrementally and cut the text at the first stop string."""

    def __init__(self, stops: Iterable[str] = ()) -> None:
        # An empty stop string would match everywhere; it means nothing to a client.
        self._stops: tuple[str, ...] = tuple(dict.fromkeys(s for s in stops if s))
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._held = ""  # decoded text not yet emitted: a possible stop-string start
        self._matched: str | None = None
        self._finished = False

    @property
    def stopped(self) -> bool:
        """True once a stop string has appeared; later pushes are ignored."""
        return self._matched is not None

    @property
    def matched(self) -> str | None:
        """The stop string that ended the text, if any."""
        return self._matched

    def push(self, piece: bytes) -> str:
        """Add one token's bytes; return the text that is now safe to emit (maybe "")."""
        if self._matched is not None or self._finished:
            return ""
        text = self._decoder.decode(piece)
        if not text:
            return ""
        return self._settle(self._held + text)

    def finish(self) -> str:
        """End the stream (EOS or length): return everything still held back."""
        if self._matched is not None or self._finished:
            return ""
        self._finished = True
        tail = self._decoder.decode(b"", final=True)
        # A stop string can still complete with the replacement of a broken tail.
        text = self._settle(self._held + tail) if tail else ""
        if self._matched is not None:
            return text
        text += self._held
        self._held = ""
        return text

    def _settle(self, text: str) -> str:
        """Emit ``text`` up to a stop string, or up to a tail that may start one."""
        if not self._stops:
            return text
        cut = -1
        for stop in self._stops:
            at = text.find(stop)
            if at != -1 and (cut == -1 or at < cut):
                cut, self._matched = at, stop
        if cut != -1:
            self._held = ""
            return text[:cut]
        keep = _longest_stop_prefix_suffix(text, self._stops)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]


def _longest_stop_prefix_suffix(text: str, stops: tuple[str, ...]) -> int:
    """Return the length of the longest tail of ``text`` that begins some stop string."""
    best = 0
    for stop in stops:
        # Only proper prefixes: a whole stop string would have matched already.
        for size in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:size]):
                best = size
                break
    return best
