"""The answer cache's store: one file per stored answer, checksummed, LRU under its own cap.

The gateway (gateway.upstream.answers) asks with AnswerLookup and sends AnswerPut after a
deterministic reply; this module keeps those answers in ``<cache.dir>/answers``.

Answers are small (a few KB of Deltas and a Done), so the files themselves are the
index: at start-up the directory is read once into an in-memory LRU order (file
modification time = last use, refreshed on every hit), so there is no second
database to keep in step or repair. Each file is a magic, a keyed BLAKE2b digest of
the key and the payload, then the payload: a torn, truncated, bit-flipped or
misplaced file fails the check, is deleted and answered as a miss, never served.
Writes go to a temporary file renamed over the final name (atomic), without an
fsync: they run on the cachekeeper's loop thread, and a file that did not reach the
disk whole before a power cut fails its digest and is a miss, which is all a cache
owes.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import os
import re
import secrets
import time
from pathlib import Path
from typing import Final

from reame.cachekeeper.store import LruStats
from reame.shared import protocol as p

log = logging.getLogger(__name__)

SUBDIR: Final = "answers"
SUFFIX: Final = ".ans"
MAGIC: Final = b"REAMEAN1"
DIGEST_BYTES: Final = 16
# A reply of the whole context with 20 logprobs per token is about this size; more is garbage.
MAX_ANSWER_BYTES: Final = 16 << 20
_KEY: Final = re.compile(r"[0-9a-f]{64}")
_PERSON: Final = b"reame-answer"


class CorruptAnswer(Exception):
    """A stored answer file that fails its check."""


def is_answer_key(key: str) -> bool:
    """A key is 64 lowercase hex digits (gateway.upstream.answers.answer_key): never a path."""
    return _KEY.fullmatch(key) is not None


def _digest(key: str, payload: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=DIGEST_BYTES, person=_PERSON)
    h.update(key.encode())
    h.update(payload)
    return h.digest()


def encode_file(key: str, payload: bytes) -> bytes:
    """Return the bytes of ``key``'s answer file."""
    return MAGIC + _digest(key, payload) + payload


def decode_file(key: str, data: bytes) -> bytes:
    """Return the payload of ``key``'s answer file; CorruptAnswer if it fails its check."""
    head = len(MAGIC) + DIGEST_BYTES
    if len(data) < head or not data.startswith(MAGIC):
        raise CorruptAnswer("no answer header")
    payload = data[head:]
    if data[len(MAGIC):head] != _digest(key, payload):
        raise CorruptAnswer("checksum mismatch")
    return payload


class AnswerStore:
    """The stored answers of one cache directory; used by the cachekeeper's loop thread only."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.hits = self.misses = self.evictions = self.corrupt = 0
        self._sizes: collections.OrderedDict[str, int] = collections.OrderedDict()  # oldest first
        self._bytes = 0
        self._load()

    def _path(self, key: str) -> Path:
        return self.directory / (key + SUFFIX)

    def _load(self) -> None:
        found: list[tuple[float, str, int]] = []
        for path in self.directory.iterdir():
            if path.name.startswith("."):  # a temporary file of a write that did not finish
                path.unlink(missing_ok=True)
            elif path.suffix == SUFFIX and is_answer_key(path.stem):
                stat = path.stat()
                found.append((stat.st_mtime, path.stem, stat.st_size))
        for _, key, size in sorted(found):
            self._sizes[key] = size
            self._bytes += size
        self._evict()

    def get(self, key: str) -> bytes | None:
        """Return the answer stored under ``key``, None (a miss) if there is none or it is corrupt."""
        if key not in self._sizes:
            self.misses += 1
            return None
        path = self._path(key)
        try:
            payload = decode_file(key, path.read_bytes())
        except (OSError, CorruptAnswer) as err:
            log.warning("dropping the answer %s: %s", key[:12], err)
            self.corrupt += 1
            self.misses += 1
            self._remove(key)
            return None
        self._sizes.move_to_end(key)
        with contextlib.suppress(OSError):
            os.utime(path)  # its recency, for the order after a restart
        self.hits += 1
        return payload

    def put(self, key: str, payload: bytes) -> bool:
        """Store an answer (replacing one under the same key); False if it cannot be stored."""
        data = encode_file(key, payload)
        if not is_answer_key(key) or len(data) > min(self.max_bytes, MAX_ANSWER_BYTES):
            return False
        temp = self.directory / f".{key}.{secrets.token_hex(4)}.tmp"
        try:
            temp.write_bytes(data)
            os.replace(temp, self._path(key))
        except OSError as err:
            log.warning("cannot store the answer %s: %s", key[:12], err)
            temp.unlink(missing_ok=True)
            return False
        self._bytes += len(data) - self._sizes.pop(key, 0)
        self._sizes[key] = len(data)
        self._evict()
        return True

    def _evict(self) -> None:
        while self._bytes > self.max_bytes and self._sizes:
            self._remove(next(iter(self._sizes)))
            self.evictions += 1

    def _remove(self, key: str) -> None:
        self._bytes -= self._sizes.pop(key, 0)
        self._path(key).unlink(missing_ok=True)

    def purge(self) -> int:
        """Delete every stored answer; return how many there were."""
        count = len(self._sizes)
        for key in list(self._sizes):
            self._remove(key)
        return count

    def stats(self) -> LruStats:
        return LruStats(len(self._sizes), self._bytes, self.max_bytes, self.hits, self.misses, self.evictions,
                           self.corrupt)


def answer(store: AnswerStore | None, message: p.AnswerLookup | p.AnswerPut) -> p.Message | None:
    """Act on a gateway's message; return the reply to send (a put has none)."""
    if isinstance(message, p.AnswerPut):
        if store is not None:
            started = time.monotonic()
            stored = store.put(message.key, message.data)
            log.debug("answer %s %s in %.1f ms", message.key[:12], "stored" if stored else "refused",
                      (time.monotonic() - started) * 1000)
        return None
    found = None if store is None or not is_answer_key(message.key) else store.get(message.key)
    return p.CacheMiss(message.request_id) if found is None else p.AnswerFound(message.request_id, found)
