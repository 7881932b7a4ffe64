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

from collections.abc import Callable, Sequence
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
        # Chunks placed whole (worker.chunk_plan): their positions [start, end) in the tokens.
        self._spans: list[tuple[int, int]] = []
        self._shift_pending = False  # a placed chunk's keys are rotated by the next decode

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
    def spans(self) -> tuple[tuple[int, int], ...]:
        """Return the positions [start, end) of the chunks placed whole (worker.chunk_plan)."""
        return tuple(self._spans)

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
        if self._spans:  # positions past a placed chunk hold what no full read gives
            keep = min(keep, self._spans[0][0])
        return keep if self.truncate(keep) else 0

    def keep(self, length: int, scope: str) -> int:
        """Keep at most the first ``length`` tokens, read under ``scope``; return how many were kept."""
        self.enter_scope(scope)  # another scope's tokens are dropped: then none are kept
        length = min(length, len(self._tokens))
        return length if self.truncate(length) else 0

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
        self._spans = [span for span in self._spans if span[1] <= length]
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

    # -- chunks (worker.chunk_plan) ------------------------------------------------------

    def read_alone(
        self, chunks: Sequence[Sequence[int]], link: int, n_batch: int, check: Callable[[], None]
    ) -> list[bytearray]:
        """Read each chunk as if the context began with it; return the states of their positions from ``link`` on.

        The cache is emptied to do so (a chunk read beside other cells comes out
        different in the last bits) and what it held is put back after, cell for cell.
        On failure the cache is emptied.
        """
        if not chunks:
            return []
        try:
            if self._shift_pending:
                # A saved state holds keys as they are, not as a pending shift would leave them:
                # decoding anything applies the shift first.
                self._model.decode([self._tokens[-1]], len(self._tokens), logits_last=False)
                self._model.drop(len(self._tokens), -1)
                self._shift_pending = False
            held = self._model.save_state() if self._tokens else None
            states = []
            for chunk in chunks:
                self._model.clear()
                for start, end in prefill_chunks(0, len(chunk), n_batch):
                    check()
                    self._model.decode(chunk[start:end], start, logits_last=False)
                if not self._model.drop(0, link):
                    raise DecodeError("the KV cache cannot drop a chunk's first positions")
                states.append(self._model.save_state())
            self._model.clear()
            if held is not None and not self._model.restore_state(held):
                raise DecodeError("the KV cache refused its own saved state")
        except BaseException:
            self.reset()
            raise
        return states

    def place(self, state: bytes | bytearray, chunk: Sequence[int], link: int) -> bool:
        """Append ``chunk``: its first ``link`` tokens read here, the rest from ``state`` (see :meth:`read_alone`).

        False if llama.cpp refused the state (nothing appended then); decode failures raise.
        """
        at = len(self._tokens)
        self.append(chunk[:link], logits_last=False)
        if not self._model.place(state, at) or self._model.positions() != at + len(chunk):
            self.truncate(at)
            return False
        self._tokens.extend(chunk[link:])
        self._spans.append((at, at + len(chunk)))
        self._shift_pending = True  # applied by the next decode
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
        self._shift_pending = False

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
        self._shift_pending = False

    def logits(self, index: int) -> npt.NDArray[np.float32]:
        """Return the logits after the ``index``-th token of the last evaluation (-1: its last)."""
        return self._model.logits(index)

    def reset(self) -> None:
        """Empty the KV cache and the token list."""
        self._model.clear()
        self._tokens.clear()
        self._stored = 0
        self._spans.clear()
        self._shift_pending = False
