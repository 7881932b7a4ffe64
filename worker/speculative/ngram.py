"""Lookup drafting: guess the next tokens by finding the recent context earlier in the text.

Answers that copy from the prompt (quote, rewrite, fill in) repeat long runs of
it; when the last few tokens occurred before, the tokens that followed them then
are a good guess for what follows now. The index remembers, for every 1-, 2-
and 3-gram, where it last occurred, and is updated as each token arrives, so a
draft costs a few dictionary lookups however long the context is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

MAX_ORDER: Final = 3  # the longest n-gram matched; longer ones rarely change the guess
# How far back the agreement between the text's tail and a match is measured: the longer
# it is, the more likely the text is being copied (worker.speculative.adaptive).
MAX_ALIGNMENT: Final = 32
NO_GUESS: Final = -1


class NgramIndex:
    """A token sequence and, for each n-gram in it, the position after its latest occurrence."""

    def __init__(self, max_order: int = MAX_ORDER) -> None:
        self.max_order = max_order
        self.tokens: list[int] = []
        # _next[n - 1][gram] = index of the token that followed the latest earlier ``gram``.
        self._next: list[dict[tuple[int, ...], int]] = [{} for _ in range(max_order)]

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int) -> None:
        """Append ``token``; the n-grams it completes become findable."""
        tokens = self.tokens
        end = len(tokens)  # ``token`` follows the grams ending here
        for n in range(1, min(self.max_order, end) + 1):
            self._next[n - 1][tuple(tokens[end - n : end])] = end
        tokens.append(token)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append every token of ``tokens``."""
        for token in tokens:
            self.add(token)

    def follower(self, order: int) -> int | None:
        """Return where the text continued after the last earlier occurrence of its last ``order`` tokens.

        The current tail itself is registered only once the next token arrives, so
        the match is always an earlier occurrence.
        """
        end = len(self.tokens)
        if not 1 <= order <= min(self.max_order, end):
            return None
        return self._next[order - 1].get(tuple(self.tokens[end - order : end]))

    def agreement(self, start: int, most: int) -> int:
        """Return how many tokens before ``start`` equal the text's last ones (at most ``most``)."""
        tokens = self.tokens
        end = len(tokens)
        n = 0
        while n < most and n < start and tokens[start - 1 - n] == tokens[end - 1 - n]:
            n += 1
        return n

    def copy_from(self, start: int, limit: int) -> tuple[int, ...]:
        """Return up to ``limit`` tokens read from ``start`` on.

        A copy that reaches the end of the text goes on with its own first tokens, as
        a repeating pattern would (``a b a b`` continues ``a b``).
        """
        tokens = self.tokens
        end = len(tokens)
        out: list[int] = []
        for i in range(start, start + limit):
            out.append(tokens[i] if i < end else out[i - end])
        return tuple(out)


class LookupDrafter:
    """Draft from the request's own prompt and output: the last 3, then 2, then 1 tokens."""

    def __init__(self, max_order: int = MAX_ORDER) -> None:
        self._index = NgramIndex(max_order)
        self._match: tuple[int, int] | None = None  # (alignment, start) for the text as it is

    def begin(self, prompt: Sequence[int], check: Callable[[], None]) -> None:
        """Start a request: index its prompt (quick: ``check`` is not needed)."""
        self._index = NgramIndex(self._index.max_order)
        self._index.extend(prompt)
        self._match = None

    def push(self, token: int) -> None:
        """Record a token of the output."""
        self._index.add(token)
        self._match = None

    def _find(self) -> tuple[int, int]:
        if self._match is None:
            index = self._index
            self._match = (0, 0)
            for order in range(index.max_order, 0, -1):
                start = index.follower(order)
                if start is not None:
                    self._match = (index.agreement(start, MAX_ALIGNMENT), start)
                    break
        return self._match

    def peek(self) -> tuple[int, int]:
        """Return the alignment of the best match (0: no match) and the token it guesses next."""
        alignment, start = self._find()
        return (alignment, self._index.tokens[start]) if alignment else (0, NO_GUESS)

    def draft(self, limit: int) -> tuple[int, ...]:
        """Propose up to ``limit`` tokens: what followed the longest match of the text's tail."""
        alignment, start = self._find()
        if not alignment or limit <= 0:
            return ()
        return self._index.copy_from(start, limit)
