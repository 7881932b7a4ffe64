"""Background warms: read a document into the KV cache on cores no user request needs.

When the gateway answers a first question about a document from ``query``'s short
text (gateway.api.plan), it also sends a warm of the document's cache-stable prefix
with ``Generate.background`` set, so that the next question finds the document read.
The scheduler applies these rules, with this module's bookkeeping:

- a warm is dropped when one of the same prompt is queued or running, or when the
  prompt is already read (a worker holds it, or the store has it);
- it goes only to an idle worker, only while no user request is queued and, when
  idle workers lend their threads (workers.lend_threads), only to a host where no
  user request runs: lent threads are not idle cores;
- a user request that finds no idle worker, waits for the worker a warm runs on, or
  lands on a host where a warm runs (lent threads) makes the warm stop at its next
  batch (Cancel; the worker checks between prefill batches and stores what it has
  read). The warm goes back to the front of the background queue and resumes, from
  that stored part, when cores are idle again. So a warm delays a user request by at
  most one batch;
- what has been read is remembered (:class:`Known`): the prefix links of every prompt
  a worker finished and stored, and the pieces of every chat read in chunk mode
  (shared.affinity.chunk_digests), so the gateway can ask (StatusQuery.prefix,
  StatusQuery.chunks) whether a document is read before it chooses how to send a
  question about it: in chunk mode a document is read when all its pieces are,
  whatever it was read with.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Final

from reame.shared import affinity

# Warms waiting for idle cores; more are dropped (the next question sends another).
QUEUE_SIZE: Final = 64
# Prefix links remembered as stored, least recently used forgotten first: 16 bytes
# and a dict slot each, a few MB at most. A forgotten document is only warmed again.
KNOWN_LINKS: Final = 1 << 16


class Known:
    """The prompt prefixes known to be read into the store, by their affinity links (an LRU)."""

    def __init__(self, capacity: int = KNOWN_LINKS) -> None:
        self._capacity = capacity
        self._links: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self._chunks: collections.OrderedDict[bytes, None] = collections.OrderedDict()

    def add(self, chain: affinity.Chain) -> None:
        """Remember every prefix of ``chain``: a stored prompt's state serves each of them."""
        for link in chain:
            self._links[link.digest] = link.chars
            self._links.move_to_end(link.digest)
        while len(self._links) > self._capacity:
            self._links.popitem(last=False)

    def chars(self, chain: affinity.Chain) -> int:
        """Return the characters of the longest prefix of ``chain`` known to be stored (0: none)."""
        for link in reversed(chain):  # a link names its whole prefix, so the first found is the longest
            if link.digest in self._links:
                self._links.move_to_end(link.digest)
                return link.chars
        return 0

    def add_chunks(self, digests: Sequence[bytes]) -> None:
        """Remember the pieces of a chat read in chunk mode: their states are in the store."""
        for digest in digests:
            self._chunks[digest] = None
            self._chunks.move_to_end(digest)
        while len(self._chunks) > self._capacity:
            self._chunks.popitem(last=False)

    def chunks_known(self, digests: Sequence[bytes]) -> int:
        """Return how many of ``digests`` (pieces, shared.affinity.chunk_digests) are known stored."""
        known = 0
        for digest in digests:
            if digest in self._chunks:
                self._chunks.move_to_end(digest)
                known += 1
        return known

    def __len__(self) -> int:
        return len(self._links)


@dataclasses.dataclass
class Counters:
    """Since the dispatcher started."""

    started: int = 0  # warms sent to a worker (again after each pre-emption)
    finished: int = 0  # ...that read their whole prompt
    preempted: int = 0  # ...that stopped for a user request, to resume later


def key(chain: affinity.Chain) -> bytes | None:
    """Name a warm by its whole prompt (scope included: the chain's root); None for an empty prompt."""
    return chain[-1].digest if chain else None


class Background:
    """The warms waiting for idle cores and running, what is known read, and the counters."""

    def __init__(self, queue_size: int = QUEUE_SIZE, known: int = KNOWN_LINKS) -> None:
        self.queue_size = queue_size
        self.queue: collections.OrderedDict[str, None] = collections.OrderedDict()  # FIFO of request ids
        self._warming: dict[bytes, str] = {}  # key -> the request id of the warm queued or running
        self.known = Known(known)
        self.counters = Counters()

    def warming(self, chain: affinity.Chain) -> bool:
        """Tell whether a warm of exactly this prompt is queued or running."""
        name = key(chain)
        return name is not None and name in self._warming

    def refusal(self, chain: affinity.Chain, read_chars: int) -> str | None:
        """Say why a warm of ``chain`` is not worth queueing (``read_chars`` of it are read already), or None."""
        if not chain:
            return "the prompt is empty"
        if self.warming(chain):
            return "a background read of this prompt is already queued or under way"
        if affinity.is_read(read_chars, chain[-1].chars):
            return "this prompt is read already"
        if len(self.queue) >= self.queue_size:
            return f"the background queue ({self.queue_size}) is full"
        return None

    def enqueue(self, request_id: str, chain: affinity.Chain, *, front: bool = False) -> None:
        """Queue a warm (back at the front after a pre-emption: it has waited longest)."""
        name = key(chain)
        if name is not None:
            self._warming[name] = request_id
        self.queue[request_id] = None
        if front:
            self.queue.move_to_end(request_id, last=False)

    def forget(self, request_id: str, chain: affinity.Chain) -> None:
        """Drop a warm (finished, failed or timed out): a later one of the same prompt is welcome."""
        self.queue.pop(request_id, None)
        name = key(chain)
        if name is not None and self._warming.get(name) == request_id:
            del self._warming[name]
