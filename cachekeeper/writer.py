"""Compress and write entries, verify and purge the store, off the cachekeeper's socket loop.

Compressing a 45 MB state takes about 60 ms and writing it (with fsync) longer;
verifying a full store takes minutes. Done on the loop, that would stall every
worker's lookup behind it. So one background thread takes jobs from a queue and
hands results back through another queue; the ZeroMQ socket stays with the loop
thread, because ZeroMQ sockets must not be shared between threads. To wake the
loop without a second socket, the thread writes a byte to a pipe whose read end
the loop's zmq poller watches next to the ROUTER socket. One thread also
serialises writes, so two puts never race for room in the cap.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Final

from reame.cachekeeper.puts import FinishedPut
from reame.cachekeeper.store import Refusal, Store
from reame.shared import kv_entry
from reame.shared.prefix import entry_key
from reame.shared.protocol import CacheCommand

log = logging.getLogger(__name__)

ERROR_REASON: Final = "error"  # CacheStored.reason when writing failed unexpectedly
PRESENT_REASON: Final = Refusal.PRESENT.value


@dataclasses.dataclass(frozen=True, slots=True)
class AdminJob:
    identity: bytes
    request_id: str
    command: CacheCommand  # VERIFY or PURGE: stats need no thread


Job = FinishedPut | AdminJob


@dataclasses.dataclass(frozen=True, slots=True)
class PutResult:
    identity: bytes
    request_id: str
    stored: bool
    reason: str
    bytes_written: int
    seconds: float = 0.0  # compressing and writing, for reame_cache_save_seconds_total
    key: str = ""  # the entry's, once known (the shared tier pushes what was written)


@dataclasses.dataclass(frozen=True, slots=True)
class AdminResult:
    identity: bytes
    request_id: str
    removed: list[str]


Result = PutResult | AdminResult


class Writer:
    """One thread running store jobs in order; results come back through :meth:`results`."""

    def __init__(
        self, store: Store, *, block_tokens: int, level: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._block_tokens = block_tokens
        self._level = level
        self._clock = clock
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._results: queue.SimpleQueue[Result] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._run, name="cache-writer", daemon=True)

    @property
    def fd(self) -> int:
        """Return the file descriptor that becomes readable when results are waiting."""
        return self._wake_r

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        self._jobs.put(job)

    def results(self) -> list[Result]:
        """Return every result waiting, oldest first, and clear the wake-up pipe."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        found: list[Result] = []
        with contextlib.suppress(queue.Empty):
            while True:
                found.append(self._results.get_nowait())
        return found

    def stop(self, timeout: float) -> bool:
        """Drop the jobs not started, let the current one finish; return whether the thread ended."""
        self._stopping.set()
        self._jobs.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout)
        stopped = not self._thread.is_alive()
        if stopped:
            os.close(self._wake_r)
            os.close(self._wake_w)
        return stopped

    def _run(self) -> None:
        while not self._stopping.is_set():
            job = self._jobs.get()
            if job is None or self._stopping.is_set():
                break
            result = self._put(job) if isinstance(job, FinishedPut) else self._admin(job)
            self._results.put(result)
            with contextlib.suppress(BlockingIOError):  # a full pipe already wakes the loop
                os.write(self._wake_w, b"\0")

    def _put(self, job: FinishedPut) -> PutResult:
        started = time.monotonic()

        key = entry_key(job.fingerprint, job.tokens)

        def result(stored: bool, reason: str = "", written: int = 0) -> PutResult:
            return PutResult(job.identity, job.request_id, stored, reason, written, time.monotonic() - started, key)

        # Two workers may have sent the same prefix at once: the second costs no compression.
        if self._store.contains(key):
            return result(True, PRESENT_REASON)
        try:
            payload = kv_entry.encode_payload(b"".join(job.chunks), level=self._level)
            header = kv_entry.EntryHeader.build(
                job.fingerprint, job.kv_type, job.tokens, self._block_tokens, payload, created=self._clock()
            )
            pending = self._store.begin_put(header)
            if isinstance(pending, Refusal):
                return result(pending is Refusal.PRESENT, pending.value)
            try:
                pending.write(payload.data)
                self._store.commit(pending)
            except BaseException:
                self._store.abort(pending)
                raise
        except Exception as err:  # a full disk, a vanished directory...: refuse, never die
            log.error("could not store cache entry for %s: %s", job.request_id, err)
            return result(False, ERROR_REASON)
        return result(True, written=pending.size)

    def _admin(self, job: AdminJob) -> AdminResult:
        removed: list[str] = []
        try:
            if job.command is CacheCommand.VERIFY:
                removed = [bad.key for bad in self._store.verify(stop=self._stopping.is_set)]
            elif job.command is CacheCommand.PURGE:
                # Puts commit on this thread too, so no put can appear between the two calls (an
                # entry the shared tier's fetch thread lands there is purged without being listed).
                removed = self._store.keys()
                self._store.purge()
            else:
                log.warning("the writer does not run %s", job.command)
        except Exception as err:
            log.error("cache %s failed: %s", job.command, err)
        return AdminResult(job.identity, job.request_id, removed)
