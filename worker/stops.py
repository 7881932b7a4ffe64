"""Turn a stream of token pieces (bytes) into text deltas, honouring stop strings.

Pure logic, no model: the engine pushes each sampled token's piece and sends
whatever text comes back. Two things are held back until they are settled:

- bytes of a UTF-8 character split across tokens (an emoji is often four
  single-byte pieces), until the character is complete;
- a text tail that could be the beginning of a stop string, until the next
  pieces show whether it is one.

A stop string never leaks into the output, even when it spans several tokens.

Matching is linear in the text: each stop string has a Knuth-Morris-Pratt automaton
whose state (how much of the stop string the text ends with) moves once per new
character. Searching the held tail again with every piece, and trying every prefix
length of every stop string, cost the square of a stop string's length per token.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable


class _Matcher:
    """How much of one stop string the text seen so far ends with (Knuth-Morris-Pratt)."""

    def __init__(self, stop: str) -> None:
        self.stop = stop
        # fallback[k]: the longest proper prefix of stop[:k + 1] that is also its suffix.
        self._fallback = [0] * len(stop)
        k = 0
        for i in range(1, len(stop)):
            while k and stop[i] != stop[k]:
                k = self._fallback[k - 1]
            if stop[i] == stop[k]:
                k += 1
            self._fallback[i] = k
        self.state = 0  # characters of ``stop`` the text ends with (less than all of it)

    def feed(self, text: str) -> int:
        """Advance over ``text``; return the index in it where the stop string ends first, or -1."""
        stop, fallback, k = self.stop, self._fallback, self.state
        if k == 0 and stop[0] not in text:
            return -1  # the common case: no character could start it
        for i, char in enumerate(text):
            while k and char != stop[k]:
                k = fallback[k - 1]
            if char == stop[k]:
                k += 1
                if k == len(stop):
                    self.state = fallback[k - 1]
                    return i
        self.state = k
        return -1


class TextStream:
    """Decode pieces incrementally and cut the text at the first stop string."""

    def __init__(self, stops: Iterable[str] = ()) -> None:
        # An empty stop string would match everywhere; it means nothing to a client.
        self._matchers = [_Matcher(s) for s in dict.fromkeys(s for s in stops if s)]
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
        return self._settle(text)

    def finish(self) -> str:
        """End the stream (EOS or length): return everything still held back."""
        if self._matched is not None or self._finished:
            return ""
        self._finished = True
        tail = self._decoder.decode(b"", final=True)
        # A stop string can still complete with the replacement of a broken tail.
        text = self._settle(tail) if tail else ""
        if self._matched is not None:
            return text
        text += self._held
        self._held = ""
        return text

    def _settle(self, new: str) -> str:
        """Emit the held text and ``new`` up to a stop string, or up to a tail that may start one.

        Of the stop strings that complete in ``new``, the one starting first wins (the
        first listed on a tie), as if the held text and ``new`` were searched for each.
        """
        text = self._held + new
        if not self._matchers:
            return text
        cut = -1
        for matcher in self._matchers:
            end = matcher.feed(new)
            if end != -1:
                at = len(self._held) + end + 1 - len(matcher.stop)
                if cut == -1 or at < cut:
                    cut, self._matched = at, matcher.stop
        if cut != -1:
            self._held = ""
            return text[:cut]
        # The longest tail that begins some stop string is exactly the largest state.
        keep = max(m.state for m in self._matchers)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]
