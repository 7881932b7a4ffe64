"""The messages to and from the cachekeeper: KV state lookups and transfers, admin, answers."""

from __future__ import annotations

import enum
from typing import ClassVar

import msgspec

from reame.shared.protocol.base import Kind, Struct


class CacheLookup(Struct, frozen=True):
    """Ask for the stored entry sharing the longest prefix with these block hashes.

    ``blocks`` is ``shared.prefix.block_hashes(fingerprint, prompt, block_tokens)``.
    ``wait_ms`` is how long the asker will wait for a save under way that goes deeper
    than any stored entry (cachekeeper.pending); 0 answers at once.
    """

    KIND: ClassVar[Kind] = Kind.CACHE_LOOKUP
    request_id: str
    fingerprint: str  # hex
    blocks: list[bytes]
    wait_ms: int = 0


class CacheMiss(Struct, frozen=True):
    """No entry shares a block with the lookup; sent after a CacheHit, it aborts that transfer."""

    KIND: ClassVar[Kind] = Kind.CACHE_MISS
    request_id: str


class CacheHit(Struct, frozen=True):
    """An entry follows as CacheChunks; ``header`` is its encoded entry header.

    ``matched_tokens`` is how many leading tokens the block hashes vouch for; the
    worker may extend the match token by token with the header's token ids.
    """

    KIND: ClassVar[Kind] = Kind.CACHE_HIT
    request_id: str
    key: str
    header: bytes
    matched_tokens: int


class CacheChunk(Struct, frozen=True):
    """A piece of a state blob: compressed when read, raw when saved."""

    KIND: ClassVar[Kind] = Kind.CACHE_CHUNK
    request_id: str
    data: bytes
    last: bool


class CachePut(Struct, frozen=True):
    """Store the raw KV state of ``tokens``, sent next as CacheChunks of ``raw_len`` bytes."""

    KIND: ClassVar[Kind] = Kind.CACHE_PUT
    request_id: str
    fingerprint: str  # hex
    kv_type: str
    tokens: list[int]
    raw_len: int


class CacheStored(Struct, frozen=True):
    """The outcome of a CachePut: ``stored``, or the reason it was not."""

    KIND: ClassVar[Kind] = Kind.CACHE_STORED
    request_id: str
    stored: bool
    reason: str = ""


class CacheCorrupt(Struct, frozen=True):
    """A worker found an entry it was sent unusable: delete it."""

    KIND: ClassVar[Kind] = Kind.CACHE_CORRUPT
    key: str
    reason: str


class CacheCommand(enum.StrEnum):
    STATS = "stats"
    VERIFY = "verify"
    PURGE = "purge"


class CacheAdmin(Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.CACHE_ADMIN
    request_id: str
    command: CacheCommand


class SharedTierReport(Struct, frozen=True):
    """The shared cache tier's counters since the cachekeeper started (cachekeeper.tier)."""

    up: bool  # the tier answered its last request (false: serving from the local store alone)
    hits: int = 0  # lookups for which an entry deeper than the local store's was fetched and stored
    misses: int = 0  # lookups the tier was asked about and held nothing deeper for (or nothing intact)
    pushes: int = 0  # entries stored locally and then in the tier
    push_drops: int = 0  # entries not pushed: the queue was full or the tier was down
    bytes_fetched: int = 0
    bytes_pushed: int = 0
    fetch_seconds: float = 0.0  # asking the index and fetching entries
    errors: int = 0  # requests to the tier that failed (each cost at most cache.shared_timeout)
    corrupt: int = 0  # entries fetched that failed their checks: refused, and deleted from the tier


class CacheReport(Struct, frozen=True):
    """The store's counters after an admin command; ``removed`` lists deleted entry keys."""

    KIND: ClassVar[Kind] = Kind.CACHE_REPORT
    request_id: str
    entries: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int
    evictions: int
    corrupt: int
    bytes_read: int
    bytes_written: int
    removed: list[str] = msgspec.field(default_factory=list)
    lookup_waits: int = 0  # lookups that waited for a save under way instead of missing
    save_seconds: float = 0.0  # spent compressing and writing stored entries
    restore_seconds: float = 0.0  # from a hit to the last chunk of its entry sent
    answer_entries: int = 0  # the answer cache (cachekeeper.answers): stored answers, their bytes, lookups
    answer_bytes: int = 0
    answer_hits: int = 0
    answer_misses: int = 0
    shared: SharedTierReport | None = None  # None: no shared tier (cache.shared_url is empty)


class AnswerLookup(Struct, frozen=True):
    """Ask for the stored answer under ``key`` (gateway.upstream.answers); CacheMiss or AnswerFound."""

    KIND: ClassVar[Kind] = Kind.ANSWER_LOOKUP
    request_id: str
    key: str


class AnswerFound(Struct, frozen=True):
    """A stored answer: ``data`` is the msgpack list of the encoded Deltas and Done the worker sent."""

    KIND: ClassVar[Kind] = Kind.ANSWER_FOUND
    request_id: str
    data: bytes


class AnswerPut(Struct, frozen=True):
    """Store an answer (the same ``data`` as AnswerFound); not acknowledged: nobody waits for it."""

    KIND: ClassVar[Kind] = Kind.ANSWER_PUT
    request_id: str
    key: str
    data: bytes
