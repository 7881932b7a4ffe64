"""Which worker a request should go to, by the text each worker holds: no sockets, no queue.

A worker keeps the KV state of the last prompt it read (worker.kv), so the
dispatcher remembers, per worker, the chain of the prompt it holds or is reading
(shared.affinity) and prefers the idle worker sharing the most text with a
request (a short chat's previous turn counts too). In chunk mode a worker also
holds in its memory the chunks it read or placed lately (worker.chunk_memory), in
any order: the text of a request's pieces among the last HELD_PIECES a worker took
counts as shared too. That is a hint, not a record of the worker's memory (which is
capped in bytes): a worker that dropped a piece fetches it from the store, as any
other worker would. When a busy worker holds at least MIN_SHARE_CHARS more of it than any
idle one, the request may wait for that worker rather than have the text read a
second time, but only for as long as reading it again would take: AFFINITY_SLACK
times the estimate from the prefill speed observed in the workers' own figures.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Final

from reame.shared import affinity
from reame.shared import protocol as p
from reame.shared.config import DispatcherConfig, defaults

# Less shared text than this is read again sooner than it is worth waiting for.
MIN_SHARE_CHARS: Final = 1024
# A waited-for worker may still be reading the document and then has to answer;
# waiting for it is worth up to this many times the reading it saves:
# dispatcher.affinity_slack, whose default is declared in shared.config.
AFFINITY_SLACK: Final = defaults(DispatcherConfig).affinity_slack
MAX_AFFINITY_WAIT_S: Final = 60.0
# Prefill speed, in characters a second, until one is observed: about 50 tokens/s, a 1.5B
# model on a slow core. Erring slow makes the first waits long rather than in vain.
DEFAULT_PREFILL_CHARS_PER_S: Final = 200.0
RATE_MIN_CHARS: Final = 2048  # a shorter prefill says more about latency than about speed
RATE_WEIGHT: Final = 0.3  # of a new observation in the running estimate
# Pieces of chats in chunk mode remembered per worker, the least recently taken forgotten
# first: a few documents' worth (a document sent as a part is one piece, joined text
# a piece per long paragraph).
HELD_PIECES: Final = 256


@dataclasses.dataclass
class Counters:
    """Since the dispatcher started."""

    full_prefills: int = 0  # requests that read most of their prompt (reused less than half)
    reused_from_memory: int = 0  # the others, whose reuse came from the worker's memory
    reused_from_store: int = 0  # ...or from the store
    affinity_waits: int = 0  # requests that waited for a busy worker holding their text


class Placement:
    """The text each worker holds, the prefill speed, and the choices made from them."""

    def __init__(self, slack: float = AFFINITY_SLACK) -> None:
        self._slack = slack  # dispatcher.affinity_slack
        self._holds: dict[bytes, affinity.Chain] = {}
        self._pieces: dict[bytes, collections.OrderedDict[bytes, int]] = {}  # worker -> digest -> chars
        self._rate = DEFAULT_PREFILL_CHARS_PER_S  # characters a second
        self._rate_observed = False
        self.counters = Counters()

    def best(
        self, candidates: Iterable[bytes], chain: affinity.Chain, pieces: Sequence[affinity.Piece] = ()
    ) -> tuple[bytes | None, int]:
        """Return the candidate holding the most of ``chain`` (the first among equals) and how much it holds.

        ``pieces``, a chat's in chunk mode: what a candidate holds of them counts
        instead where it is more.
        """
        best, most = None, -1
        for worker in candidates:
            shared = max(self._useful_share(worker, chain), self._pieces_held(worker, pieces))
            if shared > most:
                best, most = worker, shared
        return best, max(most, 0)

    def _pieces_held(self, worker: bytes, pieces: Sequence[affinity.Piece]) -> int:
        """Return the characters of ``pieces`` that ``worker`` read or placed lately."""
        held = self._pieces.get(worker)
        return sum(piece.chars for piece in pieces if piece.digest in held) if held else 0

    def _useful_share(self, worker: bytes, chain: affinity.Chain) -> int:
        """Return what ``worker`` holds of ``chain``, if worth sending the request there.

        Less than MIN_SHARE_CHARS counts too when it is all the worker holds (a short
        chat's previous turn, which the new turn repeats): sending the turn there costs
        the worker nothing it holds and spares reading the conversation again. A
        shared opening alone (the same role, a short system prompt) does not count, so
        unrelated prompts still spread over the workers, each keeping its own.
        """
        held = self._holds.get(worker, ())
        shared = affinity.shared_chars(held, chain)
        if shared >= MIN_SHARE_CHARS or (len(held) > 1 and shared == held[-1].chars):
            return shared
        return 0

    @property
    def may_wait(self) -> bool:
        """Tell whether a request may ever wait for a busy worker (dispatcher.affinity_slack > 0)."""
        return self._slack > 0

    def wait_bound(self, gain_chars: int) -> float:
        """Return how long a request may wait for a worker that spares it reading ``gain_chars``."""
        return min(MAX_AFFINITY_WAIT_S, self._slack * gain_chars / self._rate)

    def assigned(self, worker: bytes, chain: affinity.Chain, pieces: Sequence[affinity.Piece] = ()) -> None:
        """Note that ``worker`` is reading ``chain`` now (in chunk mode: ``pieces``, into its memory)."""
        self._holds[worker] = chain
        if pieces:
            held = self._pieces.setdefault(worker, collections.OrderedDict())
            for piece in pieces:
                held[piece.digest] = piece.chars
                held.move_to_end(piece.digest)
            while len(held) > HELD_PIECES:
                held.popitem(last=False)

    def finished(self, worker: bytes, chain: affinity.Chain, done: p.Done | None, *, count: bool = True) -> None:
        """Learn from a request's end; ``done`` None: it failed, anywhere in its prompt.

        ``count`` False leaves the prefill counters alone (background warms have their own).
        """
        if done is None:
            self._holds.pop(worker, None)
            return
        if not count:
            self._observe(chain, done)
            return
        counters = self.counters
        # Reusing a chat template's opening tokens is not reading a document once.
        if done.cached_tokens * 2 < done.prompt_tokens or done.cached_tokens == 0:
            counters.full_prefills += 1
        elif done.restored_tokens > 0:
            counters.reused_from_store += 1
        else:
            counters.reused_from_memory += 1
        self._observe(chain, done)

    def held(self, worker: bytes) -> tuple[int, str]:
        """Return the characters of the prompt ``worker`` holds or is reading, and a short hash naming it."""
        chain = self._holds.get(worker, ())
        return (chain[-1].chars, chain[-1].digest.hex()[:12]) if chain else (0, "")

    def forget(self, worker: bytes) -> None:
        self._holds.pop(worker, None)
        self._pieces.pop(worker, None)

    def _observe(self, chain: affinity.Chain, done: p.Done) -> None:
        """Learn the prefill speed from a request whose worker read much of its text.

        The worker's own figures count what it read, not what it restored or kept in
        memory, and leave out the time the request spent queued.
        """
        read = done.prompt_tokens - done.cached_tokens
        if not chain or done.prompt_tokens <= 0 or read <= 0 or done.prompt_ms <= 0:
            return
        fresh_chars = chain[-1].chars * read / done.prompt_tokens
        if fresh_chars < RATE_MIN_CHARS:
            return
        rate = fresh_chars / (done.prompt_ms / 1000)
        weight = RATE_WEIGHT if self._rate_observed else 1.0
        self._rate += weight * (rate - self._rate)
        self._rate_observed = True
