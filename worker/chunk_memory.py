"""Keep the chunk states a worker read or fetched lately in its RAM: a document met again is placed at once.

The store (worker.chunk_store) serves every worker and outlives restarts, but a
state fetched from it crosses a socket and is decompressed (tens of megabytes for
a document of a 1.5B model: most of a second), and a state just read is still on
its way there when a retrieval pipeline's next question comes, a moment later:
that question would miss it and read the document again. So every state a worker
reads alone or fetches stays here too, under the same key as in the store (model,
scope, link and the chunk's tokens: a scope never finds another's), the least
recently used dropped first once they pass ``cache.chunk_memory`` bytes. The
dispatcher sends a request to the worker holding most of its chunks
(dispatcher.placement), which is why this is worth having per worker.
"""

from __future__ import annotations

import collections


class ChunkMemory:
    """Chunk states by key, least recently used dropped first beyond ``max_bytes`` (0 keeps none)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._states: collections.OrderedDict[bytes, bytes | bytearray] = collections.OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._states)

    @property
    def size(self) -> int:
        """Return the bytes the held states take."""
        return self._bytes

    def get(self, key: bytes) -> bytes | bytearray | None:
        """Return the state under ``key`` (now the most recently used), or None."""
        state = self._states.get(key)
        if state is not None:
            self._states.move_to_end(key)
        return state

    def put(self, key: bytes, state: bytes | bytearray) -> None:
        """Hold ``state`` under ``key``, dropping the least recently used to stay under the cap.

        A state larger than the cap is not held (it would only push every other out).
        The state is held as given, not copied: callers never write to a state after.
        """
        self.drop(key)
        if len(state) > self.max_bytes:
            return
        self._states[key] = state
        self._bytes += len(state)
        while self._bytes > self.max_bytes:
            _, oldest = self._states.popitem(last=False)
            self._bytes -= len(oldest)

    def drop(self, key: bytes) -> None:
        """Forget the state under ``key`` (llama.cpp refused it), if held."""
        state = self._states.pop(key, None)
        if state is not None:
            self._bytes -= len(state)
