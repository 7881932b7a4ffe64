"""Keep the list of tokens in the KV cache and the cache itself in step.

This is the only place that knows which tokens sit in the context's memory.
Reusing the common prefix of consecutive requests is what llama.cpp's server
does with ``cache_prompt``. A prefix may also come from the persistent cache
(:meth:`KvCache.restore`); the class then remembers how much of its token list
is known to be stored, so the same document is not saved twice. It also remembers
the cache scope its tokens were read under (``Generate.cache_scope``): a request of
another scope reuses nothing, so neither cached_tokens nor timing shows it what
a request of another scope (another API key) has read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from reame.worker.model import DecodeError, Model

# llama.cpp evaluates a one-token batch with other kernels than a larger batch, and
# the KV entries it writes differ in the last bits: a prompt whose final token was
# evaluated alone then decodes differently (measured: greedy output diverged after
# 20 tokens). Evaluating the prompt's tail in batches of at least two tokens keeps
# the output identical whether a prefix came from a cache or was computed afresh.
MIN_FRESH: Final = 2


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Return how many leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def reusable(cached: Sequence[int], prompt: Sequence[int]) -> int:
    """Return how many cached tokens a new prompt can keep.

    The last MIN_FRESH prompt tokens are always evaluated again: sampling needs
    fresh logits (the cache holds KV entries, not logits), and see MIN_FRESH.
    """
    return max(0, min(common_prefix(cached, prompt), len(prompt) - MIN_FRESH))


def prefill_chunks(start: int, end: int, n_batch: int) -> list[tuple[int, int]]:
    """Split prompt positions [start, end) into decode batches of at most ``n_batch``.

    The last batch never holds a single token when more than one is to be read
    (see MIN_FRESH): the one before it gives up a token instead.
    """
    chunks = [(i, min(i + n_batch, end)) for i in range(start, end, n_batch)]
    if len(chunks) >= 2 and chunks[-1][1] - chunks[-1][0] < MIN_FRESH and n_batch >= MIN_FRESH:
        first, last = chunks[-2][0], chunks[-1][1]
        cut = last - MIN_FRESH
        chunks[-2:] = [(first, cut), (cut, last)]
    return chunks


class KvCache:
    """The token sequence held in the model's KV cache (sequence 0)."""

    def __init__(self, model: Model) -> None:
        self._model = model
        self._tokens: list[int] = []
        self._stored = 0  # leading tokens known to be in the persistent store
        self._scope = ""  # the cache scope the tokens were read under

    def __len__(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> tuple[int, ...]:
        return tuple(self._tokens)

    @property
    def stored(self) -> int:
        """Return how many leading tokens are known to have their state in the persistent store."""
        return self._stored

    def mark_stored(self, length: int) -> None:
        """Record that the state of the first ``length`` tokens is in the persistent store."""
        self._stored = max(self._stored, min(length, len(self._tokens)))

    def unmark_stored(self, length: int) -> None:
        """Record that only the first ``length`` tokens are known to be stored (a queued save failed)."""
        self._stored = min(self._stored, length)

    @property
    def scope(self) -> str:
        return self._scope

    def enter_scope(self, scope: str) -> None:
        """Make ``scope`` the cache scope of what is read next; empty the cache if it held another's."""
        if scope != self._scope:
            self.reset()
            self._scope = scope

    def keep_prefix_of(self, prompt: Sequence[int], scope: str = "") -> int:
        """Drop everything but the reusable prefix of ``prompt``, read under ``scope``; return its length."""
        self.enter_scope(scope)
        keep = reusable(self._tokens, prompt)
        return keep if self.truncate(keep) else 0

    def truncate(self, length: int) -> bool:
        """Keep only the first ``length`` tokens; False if the cache had to be emptied instead."""
        if length >= len(self._tokens):
            return True
        if not self._model.truncate(length):
            # Some caches (recurrent models) cannot cut a sequence in the middle.
            self.reset()
            return False
        del self._tokens[length:]
        self._stored = min(self._stored, length)
        return True

    def restore(self, state: bytes | bytearray, tokens: Sequence[int]) -> bool:
        """Load a stored state and keep its first ``len(tokens)`` positions, which hold ``tokens``.

        The state may cover more positions than ``tokens``: the rest is cut. On failure
        the cache is emptied (llama.cpp may have written part of the state) and False
        is returned.
        """
        self.reset()
        if (
            not self._model.restore_state(state)
            or not self._model.truncate(len(tokens))
            # A state shorter than its entry claims would leave positions unfilled.
            or self._model.positions() != len(tokens)
        ):
            self.reset()
            return False
        self._tokens = list(tokens)
        self._stored = len(tokens)
        return True

    def save_state(self) -> bytearray:
        """Copy the KV state of every token in :attr:`tokens`."""
        return self._model.save_state()

    def append(self, tokens: Sequence[int], logits_last: bool) -> None:
        """Evaluate ``tokens`` (at most n_batch) after the cached ones.

        On failure the cache is emptied, since llama.cpp may have kept part of the batch.
        """
        try:
            self._model.decode(tokens, len(self._tokens), logits_last)
        except DecodeError:
            self.reset()
            raise
        self._tokens.extend(tokens)

    def evaluate(self, tokens: Sequence[int]) -> None:
        """Evaluate ``tokens`` after the cached ones with logits at every position (see :meth:`logits`).

        On failure the cache is emptied.
        """
        try:
            self._model.decode(tokens, len(self._tokens), logits_last=True, logits_all=True)
        except DecodeError:
            self.reset()
            raise
        self._tokens.extend(tokens)

    def logits(self, index: int) -> npt.NDArray[np.float32]:
        """Return the logits after the ``index``-th token of the last evaluation (-1: its last)."""
        return self._model.logits(index)

    def reset(self) -> None:
        """Empty the KV cache and the token list."""
        self._model.clear()
        self._tokens.clear()
        self._stored = 0
