"""Collect the raw KV states workers send to be stored: bounded, checked, and dropped when idle.

A put is a CachePut followed by CacheChunks carrying the same request id from the
same worker. Raw states are tens of megabytes, so what is held in memory at once
is bounded: a put larger than the cache is refused at once, at most ``max_puts``
are collected or waiting to be written together, and one whose worker has been
silent for ``idle_s`` is dropped (the worker crashed or gave up). No sockets
here: the loop calls these methods and sends what they say.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Final

from reame.shared import prefix
from reame.shared.protocol import CacheChunk, CachePut

MAX_PUTS: Final = 4
IDLE_S: Final = 30.0
# Longer than any cache type name ("f16", "q8_0"...), short enough to log.
MAX_KV_TYPE_CHARS: Final = 32


class Reason(enum.StrEnum):
    """Why a put was not accepted or not finished (sent as CacheStored.reason)."""

    BUSY = "busy"  # too many puts under way
    TOO_BIG = "too_big"  # the raw state is larger than the whole cache
    INVALID = "invalid"  # a malformed CachePut
    BAD_LENGTH = "bad_length"  # the chunks do not add up to raw_len
    EXPIRED = "expired"  # the worker went silent in the middle


class Progress(enum.Enum):
    MORE = "more"  # the put goes on
    UNKNOWN = "unknown"  # no put under way with this id (refused, expired, or never begun)


@dataclasses.dataclass(frozen=True, slots=True)
class Accepted:
    """A put that is now being collected; ``key`` names the entry it would become."""

    key: str


@dataclasses.dataclass(frozen=True, slots=True)
class Failed:
    request_id: str
    reason: Reason


@dataclasses.dataclass(frozen=True, slots=True)
class FinishedPut:
    """A whole raw state, ready to be compressed and written."""

    identity: bytes
    request_id: str
    fingerprint: bytes
    kv_type: str
    tokens: list[int]
    chunks: list[bytes]  # joined only by the writer, so the copy happens off the loop

    @property
    def raw_len(self) -> int:
        return sum(len(c) for c in self.chunks)


@dataclasses.dataclass
class _Partial:
    put: CachePut
    fingerprint: bytes
    chunks: list[bytes]
    received: int
    last_seen: float


def check_put(put: CachePut, max_raw_bytes: int) -> tuple[bytes, str] | Reason:
    """Return the put's fingerprint bytes and entry key, or why it cannot be taken."""
    try:
        fingerprint = bytes.fromhex(put.fingerprint)
        key = prefix.entry_key(fingerprint, put.tokens)  # also checks every id fits int32
    except ValueError:
        return Reason.INVALID
    if not fingerprint or not put.tokens or put.raw_len < 1:
        return Reason.INVALID
    if not put.kv_type or len(put.kv_type) > MAX_KV_TYPE_CHARS:
        return Reason.INVALID
    if put.raw_len > max_raw_bytes:
        return Reason.TOO_BIG
    return fingerprint, key


class PartialPuts:
    """The puts being collected, keyed by (worker identity, request id)."""

    def __init__(self, max_raw_bytes: int, *, max_puts: int = MAX_PUTS, idle_s: float = IDLE_S) -> None:
        if max_raw_bytes < 1 or max_puts < 1 or idle_s <= 0:
            raise ValueError(f"need positive limits, got {max_raw_bytes}, {max_puts}, {idle_s}")
        self._max_raw = max_raw_bytes
        self._max_puts = max_puts
        self._idle_s = idle_s
        self._open: dict[tuple[bytes, str], _Partial] = {}
        self._writing = 0  # finished puts handed to the writer and not yet answered

    @property
    def in_progress(self) -> int:
        """Return how many puts hold memory: being collected or waiting to be written."""
        return len(self._open) + self._writing

    def begin(self, identity: bytes, put: CachePut, now: float) -> Accepted | Reason:
        """Start collecting ``put``; a put already under way with the same id starts over."""
        checked = check_put(put, self._max_raw)
        if isinstance(checked, Reason):
            return checked
        fingerprint, key = checked
        self._open.pop((identity, put.request_id), None)
        if self.in_progress >= self._max_puts:
            return Reason.BUSY
        self._open[identity, put.request_id] = _Partial(put, fingerprint, [], 0, now)
        return Accepted(key)

    def drop(self, identity: bytes, request_id: str) -> bool:
        """Forget a put (already stored, say); return whether it was under way."""
        return self._open.pop((identity, request_id), None) is not None

    def feed(self, identity: bytes, chunk: CacheChunk, now: float) -> Progress | FinishedPut | Failed:
        """Add a chunk; the last one finishes the put, a length that does not add up fails it."""
        partial = self._open.get((identity, chunk.request_id))
        if partial is None:
            return Progress.UNKNOWN
        partial.received += len(chunk.data)
        partial.last_seen = now
        if partial.received > partial.put.raw_len or (chunk.last and partial.received != partial.put.raw_len):
            del self._open[identity, chunk.request_id]
            return Failed(chunk.request_id, Reason.BAD_LENGTH)
        if chunk.data:
            partial.chunks.append(chunk.data)
        if not chunk.last:
            return Progress.MORE
        del self._open[identity, chunk.request_id]
        self._writing += 1
        put = partial.put
        return FinishedPut(identity, put.request_id, partial.fingerprint, put.kv_type, put.tokens, partial.chunks)

    def written(self) -> None:
        """Free the slot of a finished put once the writer has stored or refused it."""
        if self._writing > 0:
            self._writing -= 1

    def expire(self, now: float) -> list[tuple[bytes, Failed]]:
        """Drop the puts idle for longer than the limit; return whom to tell."""
        stale = [key for key, partial in self._open.items() if now - partial.last_seen > self._idle_s]
        for key in stale:
            del self._open[key]
        return [(identity, Failed(request_id, Reason.EXPIRED)) for identity, request_id in stale]

    def clear(self) -> int:
        """Drop every put being collected (at shutdown); return how many."""
        count = len(self._open)
        self._open.clear()
        return count
