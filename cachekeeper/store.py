"""Own a directory of cache entries: find the longest stored prefix, admit, evict, repair.

The directory holds one ``<key>.kv`` file per entry (see entry.py), the SQLite index
(see index.py) and a lock file: one process owns a directory at a time, and at open
directory.py removes what dead writers left and reconciles the index with the files.
A kill -9 at any point therefore costs at most the entry being written.

Every public method takes one internal lock; streaming a payload in or out happens
outside it, so one thread may stream an entry while another looks up.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Final

from reame.cachekeeper import entry
from reame.cachekeeper.directory import INDEX_NAME, StoreLocked, index_row, open_index, reconcile, take_directory
from reame.cachekeeper.index import IndexRow
from reame.shared.kv_entry import CHUNK_BYTES, CorruptEntry, EntryHeader

log = logging.getLogger(__name__)

__all__ = ["INDEX_NAME", "Corruption", "LruStats", "Match", "PendingPut", "ReadHandle", "Refusal", "Store",
           "StoreLocked", "StoreStats", "disk_free_bytes"]

# last_used strictly increases even when the clock stands still: recency is order of use.
_TICK: Final = 1e-6


class Refusal(enum.StrEnum):
    """Why begin_put declined to store an entry."""

    TOO_BIG = "too_big"  # larger than the whole cache
    DISK_FULL = "disk_full"  # writing it would leave less than min_free_bytes on the disk
    NO_ROOM = "no_room"  # the cap cannot be met without evicting entries in use
    PRESENT = "present"  # already stored
    IN_PROGRESS = "in_progress"  # another put of the same key is under way


@dataclasses.dataclass(frozen=True, slots=True)
class Match:
    """The stored entry sharing the longest prefix with a lookup."""

    key: str
    depth: int  # leading full blocks shared with the lookup
    matched_tokens: int  # depth * block_tokens
    n_tokens: int  # tokens the entry covers (it may go on past the match)
    bytes: int


@dataclasses.dataclass(frozen=True, slots=True)
class LruStats:
    """What an LRU store under a byte cap reports (this store's KV states, and the answer store's replies)."""

    entries: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int
    evictions: int
    corrupt: int


@dataclasses.dataclass(frozen=True, slots=True)
class StoreStats(LruStats):
    puts: int
    refusals: int


@dataclasses.dataclass(frozen=True, slots=True)
class Corruption:
    key: str
    reason: str


def disk_free_bytes(directory: Path) -> int:
    """Return the bytes an unprivileged writer may still use on the directory's disk."""
    return shutil.disk_usage(directory).free


class PendingPut:
    """An entry being written: feed it chunks, then Store.commit it, or Store.abort it on any error."""

    def __init__(self, writer: entry.EntryWriter, size: int) -> None:
        self.writer = writer
        self.header = writer.header
        self.key = writer.path.name.removesuffix(entry.ENTRY_SUFFIX)
        self.size = size

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        self.writer.write(chunk)


class ReadHandle:
    """An entry pinned against eviction while its payload is read; close it when done."""

    def __init__(self, store: Store, key: str, reader: entry.EntryReader) -> None:
        self._store = store
        self._reader = reader
        self.key = key
        self.header = reader.header
        self._open = True

    def chunks(self, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """Yield the compressed payload; a damaged entry is deleted, then CorruptEntry raised."""
        try:
            yield from self._reader.chunks(chunk_bytes)
        except CorruptEntry as err:
            self._store.delete(self.key, err.reason)
            raise

    def file_bytes(self) -> bytes:
        """Return the whole entry file as it is on disk, its payload checked (the shared tier pushes it)."""
        return self._reader.header_bytes() + b"".join(self.chunks())

    def close(self) -> None:
        if self._open:
            self._open = False
            self._reader.close()
            self._store._release(self.key)

    def __enter__(self) -> ReadHandle:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class Store:
    """A size-capped, disk-backed store of KV-cache entries, found by block-hash prefix."""

    def __init__(
        self, directory: Path, max_bytes: int, min_free_bytes: int, *,
        clock: Callable[[], float] = time.time, free_bytes: Callable[[Path], int] = disk_free_bytes,
    ) -> None:
        if max_bytes <= 0 or min_free_bytes < 0:
            raise ValueError(f"need max_bytes > 0 and min_free_bytes >= 0, got {max_bytes} and {min_free_bytes}")
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self.min_free_bytes = min_free_bytes
        self._clock = clock
        self._free_bytes = free_bytes
        self._lock = threading.RLock()
        self._writing: dict[str, PendingPut] = {}
        self._readers: collections.Counter[str] = collections.Counter()
        self._counts: collections.Counter[str] = collections.Counter()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = take_directory(self.directory)
        try:
            self._index = open_index(self.directory)
            self._last_use = self._index.latest_use()
            self._counts["corrupt"] += reconcile(self.directory, self._index)
            self._make_room(0)
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _now(self) -> float:
        self._last_use = max(self._clock(), self._last_use + _TICK)
        return self._last_use

    def lookup(self, fingerprint: bytes, block_hashes: Sequence[bytes], *, peek: bool = False) -> Match | None:
        """Return the entry sharing the most leading blocks (mark it used), or None; a peek is not counted."""
        with self._lock:
            found = self._index.deepest(fingerprint.hex(), block_hashes)
            row = None if found is None else self._index.get(found[0])
            if found is None or row is None:
                self._counts["misses"] += not peek
                return None
            key, depth = found
            self._index.touch(key, self._now())
            self._counts["hits"] += not peek
            return Match(key, depth, depth * row.block_tokens, row.n_tokens, row.bytes)

    def contains(self, key: str) -> bool:
        with self._lock:
            return self._index.get(key) is not None

    def open_read(self, key: str) -> ReadHandle | None:
        """Open an entry for reading, pinned against eviction; None if absent or corrupt."""
        with self._lock:
            row = self._index.get(key)
            if row is None:
                return None
            try:
                reader = entry.EntryReader(self.directory / row.file)
            except FileNotFoundError:
                log.warning("cache entry %s vanished from the directory", key)
                self._index.remove(key)
                return None
            except CorruptEntry as err:
                self.delete(key, err.reason)
                return None
            if reader.header.key() != key:  # another entry's file put in its place
                reader.close()
                self.delete(key, "file name does not match the tokens in its header")
                return None
            self._readers[key] += 1
            return ReadHandle(self, key, reader)

    def _release(self, key: str) -> None:
        with self._lock:
            self._readers[key] -= 1
            if self._readers[key] <= 0:
                del self._readers[key]

    def begin_put(self, header: EntryHeader) -> PendingPut | Refusal:
        """Reserve room for an entry and open its writer, or say why it will not be stored."""
        key, size = header.key(), header.file_size
        with self._lock:
            refusal = self._refusal(key, size)
            if refusal is not None:
                self._counts["refusals"] += 1
                log.info("not storing cache entry %s (%d bytes): %s", key, size, refusal)
                return refusal
            put = PendingPut(entry.EntryWriter(self.directory / (key + entry.ENTRY_SUFFIX), header), size)
            self._writing[key] = put
            return put

    def _refusal(self, key: str, size: int) -> Refusal | None:
        if key in self._writing:
            return Refusal.IN_PROGRESS
        if self._index.get(key) is not None:
            return Refusal.PRESENT
        if size > self.max_bytes:
            return Refusal.TOO_BIG
        unwritten = sum(put.size - put.writer.written for put in self._writing.values())
        if self._free_bytes(self.directory) - unwritten - size < self.min_free_bytes:
            return Refusal.DISK_FULL
        if not self._make_room(size):
            return Refusal.NO_ROOM
        return None

    def commit(self, put: PendingPut) -> None:
        """Make a finished entry durable and findable; CorruptEntry if its payload is wrong."""
        try:
            size = put.writer.commit()
        finally:
            with self._lock:
                self._writing.pop(put.key, None)
        with self._lock:
            self._index.add(index_row(put.key, put.header, size, self._now()), put.header.blocks)
            self._counts["puts"] += 1

    def abort(self, put: PendingPut) -> None:
        """Drop an unfinished entry and its reservation."""
        put.writer.abort()
        with self._lock:
            self._writing.pop(put.key, None)

    def _make_room(self, size: int) -> bool:
        """Evict least recently used entries not in use until ``size`` more bytes fit the cap."""
        reserved = sum(put.size for put in self._writing.values())
        excess = self._index.total_bytes() + reserved + size - self.max_bytes
        if excess <= 0:
            return True
        victims: list[IndexRow] = []
        for row in self._index.least_recent():
            if excess <= 0:
                break
            if row.key not in self._readers:
                victims.append(row)
                excess -= row.bytes
        if excess > 0:
            return False  # evicting every idle entry would not be enough: keep them all
        for row in victims:
            self._remove(row.key, row.file)
            self._counts["evictions"] += 1
            log.info("evicted cache entry %s (%d bytes)", row.key, row.bytes)
        return True

    def _remove(self, key: str, file: str) -> None:
        # File first: a kill in between leaves a row without a file, which the next open drops.
        (self.directory / file).unlink(missing_ok=True)
        self._index.remove(key)

    def delete(self, key: str, reason: str) -> bool:
        """Delete a corrupt entry and count it; return whether it was there."""
        with self._lock:
            row = self._index.get(key)
            if row is None:
                return False
            log.warning("deleting corrupt cache entry %s: %s", key, reason)
            self._remove(key, row.file)
            self._counts["corrupt"] += 1
            return True

    def verify(self, stop: Callable[[], bool] = lambda: False) -> list[Corruption]:
        """Check every entry's checksums; delete the bad ones and return what was wrong.

        ``stop`` is asked before each entry: a big store takes minutes, and a
        shutdown should not wait for all of it.
        """
        with self._lock:
            rows = self._index.rows()
        bad: list[Corruption] = []
        for row in rows:
            if stop():
                break
            try:
                header = entry.check_entry(self.directory / row.file)
                reason = None if header.key() == row.key else "file name does not match the tokens in its header"
            except FileNotFoundError:
                reason = "file missing"
            except CorruptEntry as err:
                reason = err.reason
            if reason is not None:
                bad.append(Corruption(row.key, reason))
                self.delete(row.key, reason)
        return bad

    def keys(self) -> list[str]:
        """Return the keys of every stored entry."""
        with self._lock:
            return [row.key for row in self._index.rows()]

    def purge(self) -> int:
        """Delete every stored entry (open readers keep their file); return how many."""
        with self._lock:
            rows = self._index.rows()
            for row in rows:
                self._remove(row.key, row.file)
            return len(rows)

    def stats(self) -> StoreStats:
        with self._lock:
            c = self._counts
            return StoreStats(
                self._index.count(), self._index.total_bytes(), self.max_bytes, c["hits"], c["misses"],
                c["evictions"], c["corrupt"], c["puts"], c["refusals"],
            )

    def close(self) -> None:
        """Close the index and give up the directory; open writers are aborted."""
        with self._lock:
            for put in self._writing.values():
                put.writer.abort()
            self._writing.clear()
            self._index.close()
            os.close(self._lock_fd)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
