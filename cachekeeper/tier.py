"""The shared cache tier behind the store: fetch what the store lacks, push what it stores, off the loop.

With ``cache.shared_url`` set, the cachekeepers of a fleet share a Redis-protocol
server (layout: cachekeeper.tier_rules). The socket loop never waits for it: two
threads of this module do all the talking.

- Fetches. A lookup the tier may answer deeper than the store (by at least
  ``cache.min_tokens``) becomes a fetch job, and the loop files the job as a put
  under way (cachekeeper.pending), so the lookup is parked as for a worker's save:
  for at most the ``CacheLookup.wait_ms`` its worker grants. The fetch thread reads
  the index (one MGET), gets the deepest entry that is there, and stores it through
  Store.begin_put/write/commit, which checks it as a worker's save is checked: an
  entry that fails is refused, counted, and deleted from the tier. The loop then
  answers the lookup from the store, with the existing streaming code.
- Pushes. After the loop learns an entry was committed, its key goes to the push
  thread (a bounded queue: full, the push is dropped and counted), which reads the
  file (checking it) and stores its bytes and index keys in the tier.

A tier that fails a request costs that request one ``cache.shared_timeout``; it is
then known to be down (logged once) and asked nothing: lookups are answered from the
store at once and pushes are dropped, while the fetch thread retries with a PING
after a backoff (tier_rules.Health) and logs once when it is back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from reame.cachekeeper import entry
from reame.cachekeeper import tier_rules as rules
from reame.cachekeeper.pending import PutId
from reame.cachekeeper.store import Refusal, Store
from reame.cachekeeper.tier_remote import Remote, RemoteError
from reame.shared.kv_entry import CorruptEntry
from reame.shared.protocol import SharedTierReport

log = logging.getLogger(__name__)

FETCH_QUEUE: Final = 16  # fetch jobs waiting; beyond that a lookup is answered from the store alone
PUSH_QUEUE: Final = 8  # entry keys waiting to be pushed (the bytes are read when pushed)
# Fetches are filed as puts under way; no ZeroMQ peer has an empty identity.
FETCH_IDENTITY: Final = b""


@dataclasses.dataclass(frozen=True, slots=True)
class Fetched:
    """A fetch that ended: release the lookups parked on ``put`` and answer them from the store."""

    put: PutId
    stored: bool


@dataclasses.dataclass(frozen=True, slots=True)
class _Fetch:
    put: PutId
    fingerprint: bytes
    blocks: tuple[bytes, ...]
    local_depth: int


@dataclasses.dataclass
class _Counts:
    hits: int = 0
    misses: int = 0
    pushes: int = 0
    push_drops: int = 0
    bytes_fetched: int = 0
    bytes_pushed: int = 0
    fetch_seconds: float = 0.0
    errors: int = 0
    corrupt: int = 0


def _wake_thread(jobs: queue.Queue[_Fetch | None] | queue.Queue[str | None]) -> None:
    # Only the loop thread puts jobs, so making room for the stop marker cannot race.
    while True:
        try:
            jobs.put_nowait(None)
            return
        except queue.Full:
            with contextlib.suppress(queue.Empty):
                jobs.get_nowait()


class SharedTier:
    """The tier's two threads, their queues, its health and its counters."""

    def __init__(
        self, store: Store, remote: Remote, where: str, *, min_gain: int,
        clock: Callable[[], float] = time.monotonic, health: rules.Health | None = None,
    ) -> None:
        self._store = store
        self._remote = remote
        self._where = where  # for the log: the URL, which holds no secret
        self._min_gain = min_gain
        self._clock = clock
        self._lock = threading.Lock()  # guards the health and the counters
        self._health = health or rules.Health()
        self._counts = _Counts()
        self._fetches: queue.Queue[_Fetch | None] = queue.Queue(FETCH_QUEUE)
        self._pushes: queue.Queue[str | None] = queue.Queue(PUSH_QUEUE)
        self._done: queue.SimpleQueue[Fetched] = queue.SimpleQueue()
        self._next_id = 0
        self._wake_r, self._wake_w = os.pipe()
        for fd in (self._wake_r, self._wake_w):
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        self._threads = [
            threading.Thread(target=self._fetch_loop, name="cache-tier-fetch", daemon=True),
            threading.Thread(target=self._push_loop, name="cache-tier-push", daemon=True),
        ]

    @property
    def fd(self) -> int:
        """Return the file descriptor that becomes readable when fetches have ended."""
        return self._wake_r

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float) -> bool:
        """Drop the jobs not started, let the current ones finish; return whether both threads ended."""
        _wake_thread(self._fetches)
        _wake_thread(self._pushes)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))
        stopped = not any(thread.is_alive() for thread in self._threads)
        if stopped:
            self._remote.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
        return stopped

    # -- the loop's side -----------------------------------------------------------

    def usable(self) -> bool:
        with self._lock:
            return self._health.up

    def fetch(self, fingerprint: bytes, blocks: Sequence[bytes], local_depth: int) -> PutId | None:
        """Queue a fetch of what the tier holds deeper than ``local_depth``; return its id, None if not asked."""
        if not rules.worth_probing(len(blocks), local_depth, self._min_gain) or not self.usable():
            return None
        self._next_id += 1
        put = (FETCH_IDENTITY, f"shared-{self._next_id}")
        try:
            self._fetches.put_nowait(_Fetch(put, fingerprint, tuple(blocks), local_depth))
        except queue.Full:
            log.debug("not asking the shared tier: %d fetches are waiting", FETCH_QUEUE)
            return None
        return put

    def push(self, key: str) -> None:
        """Queue a committed entry for the tier; drop (and count) it when the queue is full or the tier down."""
        if self.usable():
            try:
                self._pushes.put_nowait(key)
                return
            except queue.Full:
                pass
        with self._lock:
            self._counts.push_drops += 1

    def results(self) -> list[Fetched]:
        """Return the fetches that ended, oldest first, and clear the wake-up pipe."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        found: list[Fetched] = []
        with contextlib.suppress(queue.Empty):
            while True:
                found.append(self._done.get_nowait())
        return found

    def report(self) -> SharedTierReport:
        with self._lock:
            return SharedTierReport(self._health.up, **dataclasses.asdict(self._counts))

    # -- health ------------------------------------------------------------------------

    def _failed(self, err: RemoteError, *, counted: bool = True) -> None:
        with self._lock:
            self._counts.errors += counted
            went_down = self._health.failed(self._clock())
            retry_s = self._health.retry_in(self._clock()) or 0.0
        if went_down:
            log.warning("the shared cache tier at %s is down (%s): serving from the local store, "
                        "trying it again in %.0f s", self._where, err, retry_s)
        else:
            log.debug("the shared cache tier at %s is still down: %s", self._where, err)

    def _succeeded(self) -> None:
        with self._lock:
            back = self._health.succeeded()
        if back:
            log.info("the shared cache tier at %s is back", self._where)

    def _retry(self) -> None:
        try:
            self._remote.ping()
        except RemoteError as err:
            self._failed(err, counted=False)  # no request waited for it
        else:
            self._succeeded()

    # -- the fetch thread -------------------------------------------------------------

    def _fetch_loop(self) -> None:
        self._retry()  # says at once whether the tier answers
        while True:
            with self._lock:
                wait = self._health.retry_in(self._clock())
            try:
                job = self._fetches.get(timeout=wait)
            except queue.Empty:
                self._retry()
                continue
            if job is None:
                return
            self._done.put(Fetched(job.put, self._fetch(job)))
            with contextlib.suppress(BlockingIOError):  # a full pipe already wakes the loop
                os.write(self._wake_w, b"\0")

    def _fetch(self, job: _Fetch) -> bool:
        """Store the deepest intact entry the tier holds for the job; return whether one was stored."""
        if not self.usable():
            return False
        started = time.monotonic()
        try:
            stored = self._fetch_deepest(job)
        except RemoteError as err:
            self._failed(err)
            return False
        except (OSError, sqlite3.Error) as err:  # the local disk or index: refuse, never die
            log.error("could not store an entry from the shared tier: %s", err)
            return False
        finally:
            with self._lock:
                self._counts.fetch_seconds += time.monotonic() - started
        self._succeeded()
        return stored

    def _fetch_deepest(self, job: _Fetch) -> bool:
        first = job.local_depth + self._min_gain  # the shallowest depth worth a transfer
        found = self._remote.index(job.fingerprint, job.blocks, first - 1)
        for candidate in rules.candidates(found, first):
            if self._store.contains(candidate.key):
                return True  # stored meanwhile (another fetch, a worker's save)
            data = self._remote.entry(candidate.key)
            if data is None:
                continue  # evicted without its index key: a miss at this depth
            if self._admit(candidate.key, data):
                with self._lock:
                    self._counts.hits += 1
                    self._counts.bytes_fetched += len(data)
                return True
        with self._lock:
            self._counts.misses += 1
        return False

    def _admit(self, key: str, data: bytes) -> bool:
        """Store an entry's bytes in the local store if they pass its checks; return whether it is stored."""
        try:
            header, payload = entry.split_entry(data)
            if header.key() != key:
                raise CorruptEntry(f"it holds entry {header.key()}")
        except CorruptEntry as err:
            self._refuse(key, err.reason)
            return False
        put = self._store.begin_put(header)
        if isinstance(put, Refusal):
            return put is Refusal.PRESENT
        try:
            put.write(payload)
            self._store.commit(put)  # checks the length and the payload's checksum
        except CorruptEntry as err:
            self._store.abort(put)
            self._refuse(key, err.reason)
            return False
        except BaseException:
            self._store.abort(put)
            raise
        return True

    def _refuse(self, key: str, reason: str) -> None:
        log.warning("refused entry %s from the shared tier: %s; deleting it there", key, reason)
        with self._lock:
            self._counts.corrupt += 1
        with contextlib.suppress(RemoteError):  # a tier that fails now is noticed by the next request
            self._remote.drop(key)

    # -- the push thread --------------------------------------------------------------

    def _push_loop(self) -> None:
        while True:
            key = self._pushes.get()
            if key is None:
                return
            if not self.usable():
                with self._lock:
                    self._counts.push_drops += 1
                continue
            self._push(key)

    def _push(self, key: str) -> None:
        try:
            handle = self._store.open_read(key)
            if handle is None:
                return  # evicted (or found damaged) since it was committed
            with handle:
                data = handle.file_bytes()
                header = handle.header
            sent = self._remote.push(key, bytes.fromhex(header.fingerprint), header.blocks, data)
        except RemoteError as err:
            self._failed(err)
            return
        except CorruptEntry:
            return  # the store deleted it and counted it
        except (OSError, sqlite3.Error) as err:
            log.error("could not read entry %s to push it to the shared tier: %s", key, err)
            return
        self._succeeded()
        with self._lock:
            self._counts.pushes += 1
            self._counts.bytes_pushed += len(data) if sent else 0
