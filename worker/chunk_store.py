"""Chunk states in the persistent store: filed and found by the chunk's own tokens.

A chunk's state (worker.chunk_plan) does not depend on what precedes it, so it is
filed under a fingerprint of its own: the model's, the cache scope, the link
length (the positions the state leaves out) and a hash of the chunk's tokens
(shared.prefix.scoped_fingerprint). A lookup names exactly one entry, however
many chunks begin alike, and a scope never finds another's chunks. The entries
are ordinary store entries (the same zstd, checksums and LRU), so every worker
finds them, and they outlive restarts. The states this worker read or fetched
lately are also held in its RAM (worker.chunk_memory), under the same
fingerprint, and looked up there first.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Final

from reame.shared.prefix import block_hashes, scoped_fingerprint, token_bytes
from reame.worker import cache_policy
from reame.worker.chunk_memory import ChunkMemory
from reame.worker.prefix_cache import CacheService

# How long a save waits for room in the upload queue (two saves wide): a prompt's chunks are
# saved together once its reply is out, each a few megabytes that the cachekeeper takes in
# tens of milliseconds.
SAVE_WAIT_S: Final = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class StoredChunk:
    key: str  # the entry's key, to report it if llama.cpp refuses the state; "" when held in memory
    state: bytes | bytearray
    fingerprint: bytes  # what it is filed under, in the store and in memory

    @property
    def in_memory(self) -> bool:
        return not self.key


def chunk_fingerprint(fingerprint: bytes, scope: str, link: int, tokens: Sequence[int]) -> bytes:
    """Return the fingerprint the state of chunk ``tokens`` is filed under."""
    digest = hashlib.blake2b(token_bytes(tokens), digest_size=16).hexdigest()
    return scoped_fingerprint(fingerprint, f"{scope}\0chunk\0{link}\0{digest}")


class ChunkStore:
    """Look chunk states up in the store and save them there, for one model and KV layout."""

    def __init__(
        self, service: CacheService, fingerprint: bytes, kv_type: str, n_ctx: int, block_tokens: int, link: int,
        memory: ChunkMemory | None = None,
    ) -> None:
        self.service = service
        self.memory = memory if memory is not None else ChunkMemory(0)
        self._fingerprint = fingerprint
        self._kv_type = kv_type
        self._n_ctx = n_ctx
        self._block_tokens = block_tokens
        self._link = link

    def lookup(self, scope: str, tokens: Sequence[int]) -> StoredChunk | None:
        """Return the state of chunk ``tokens`` held in memory, else stored (then held in memory too), or None."""
        fingerprint = chunk_fingerprint(self._fingerprint, scope, self._link, tokens)
        held = self.memory.get(fingerprint)
        if held is not None:
            return StoredChunk("", held, fingerprint)
        if not self.service.available:
            return None
        wanted = tuple(tokens)
        fetched = self.service.lookup(
            fingerprint, block_hashes(fingerprint, tokens, self._block_tokens),
            lambda header: header.tokens == wanted
            and cache_policy.entry_problem(header, fingerprint, self._kv_type, self._n_ctx) is None,
        )
        if fetched is None or fetched.header.tokens != wanted:
            return None
        self.memory.put(fingerprint, fetched.state)
        return StoredChunk(fetched.key, fetched.state, fingerprint)

    def remember(self, scope: str, tokens: Sequence[int], state: bytes | bytearray) -> None:
        """Hold the state of chunk ``tokens``, just read alone, in memory (the store gets it after the reply)."""
        self.memory.put(chunk_fingerprint(self._fingerprint, scope, self._link, tokens), state)

    def save(self, scope: str, tokens: Sequence[int], state: bytes | bytearray, wait: float) -> bool:
        """Queue the state of chunk ``tokens`` for the store, waiting up to ``wait`` s for room; False if not taken."""
        if not self.service.available:
            return False
        fingerprint = chunk_fingerprint(self._fingerprint, scope, self._link, tokens)
        return self.service.save(tokens, state, wait=wait, fingerprint=fingerprint)

    def refused(self, found: StoredChunk, reason: str) -> None:
        """Forget a state llama.cpp refused to place: from memory, and from the store if it came from there."""
        self.memory.drop(found.fingerprint)
        if found.key:
            self.service.report_corrupt(found.key, reason)
