"""The worker's side of the cachekeeper conversation: prefix lookups and saves.

Two sockets, each owned by one thread (ZeroMQ sockets are not thread-safe):

- the engine thread's DEALER serves :meth:`CacheClient.lookup` and
  :meth:`CacheClient.report_corrupt`. A lookup waits at most ``timeout`` for each
  reply (the hit or miss, then every chunk) and never raises: whatever goes wrong
  costs one timeout and ends as None, so the request is computed without the cache.
  It lets the cachekeeper hold the answer for up to half that timeout while a save
  of a longer prefix is under way (``CacheLookup.wait_ms``, cachekeeper.pending):
  waiting for a state beats computing it again, and half leaves the other half for
  the reply to arrive, so such a wait never counts as the cachekeeper going silent;
- the uploader thread's DEALER (worker.cache_uploader) sends saved states, so
  that a client never waits for a save.

A cachekeeper that does not answer in time is skipped by both for RETRY_AFTER_S
(see worker.cache_health.Health), so a dead or stuck cachekeeper costs one timeout per
period, not one per request. After a timeout the socket is replaced: the late
replies go to an identity that no longer exists instead of mixing with the next
conversation.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

import zmq

from reame.shared import endpoints, protocol, upstream
from reame.shared.kv_entry import CorruptEntry, EntryHeader, PayloadDecoder, decode_header
from reame.shared.protocol import CacheChunk, CacheCorrupt, CacheHit, CacheLookup, CacheMiss, Message
from reame.worker.cache_health import RETRY_AFTER_S, Health
from reame.worker.cache_uploader import Uploader, upload_bound

log = logging.getLogger(__name__)

PENDING_SAVES: Final = 2  # each holds a whole state (tens of MB): keep the backlog small

Reply = CacheHit | CacheMiss | CacheChunk


def lookup_wait_ms(timeout: float) -> int:
    """Return how long a lookup lets the cachekeeper wait for a save under way: half the timeout."""
    return max(0, int(timeout * 1000) // 2)


@dataclasses.dataclass(frozen=True, slots=True)
class Fetched:
    """A stored entry, checked and decompressed, with what it took to get it."""

    key: str
    header: EntryHeader
    state: bytes | bytearray  # the raw KV state, as Model.save_state returned it
    wait_ms: float  # from sending the lookup to the hit
    transfer_ms: float  # receiving the compressed chunks
    decode_ms: float  # checksum, decompression


class CacheClient:
    """Look up, report and save KV states for one model at one cachekeeper address."""

    def __init__(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        address: str,
        fingerprint: bytes,
        kv_type: str,
        timeout: float,
        *,
        retry_after: float = RETRY_AFTER_S,
        pending: int = PENDING_SAVES,
        clock: Callable[[], float] = time.monotonic,
        keys: endpoints.LinkKeys = endpoints.PLAIN,  # CURVE for a tcp:// address
    ) -> None:
        self._context = context
        self._address = address
        self._keys = keys
        self._fingerprint = fingerprint
        self._timeout = timeout
        self._wait_ms = lookup_wait_ms(timeout)
        self._health = Health(address, retry_after, clock)
        self._ids = itertools.count()
        self._id_prefix = f"{os.getpid()}-{secrets.token_hex(3)}"
        self._stale = 0
        self._pending = pending
        self._socket = self._open()
        self._uploader = Uploader(
            context, address, fingerprint.hex(), kv_type, timeout, self._health, self._next_id, pending, keys,
        )
        self._uploader.start()

    @property
    def available(self) -> bool:
        """False while the cachekeeper is being skipped after a timeout."""
        return self._health.usable()

    def _next_id(self) -> str:
        return f"{self._id_prefix}-{next(self._ids)}"

    def _open(self) -> zmq.Socket[bytes]:
        return upstream.dealer(self._context, self._address, self._keys)

    def _reopen(self) -> None:
        self._socket.close(linger=0)
        self._socket = self._open()

    # -- engine thread ---------------------------------------------------------------

    def lookup(
        self, fingerprint: bytes, blocks: Sequence[bytes], wanted: Callable[[EntryHeader], bool] | None = None
    ) -> Fetched | None:
        """Fetch the stored entry sharing the most leading blocks, or None; never raises.

        ``wanted`` sees the entry's header before its payload is transferred; False
        makes it a miss (the chunks already on their way are dropped as stale later).
        """
        if not blocks or not self._health.usable():
            return None
        try:
            return self._lookup(fingerprint, blocks, wanted)
        except zmq.ZMQError as err:
            log.warning("cache lookup failed: %s", err)
            self._reopen()
            self._health.failed("lookup")
            return None
        except Exception:
            # A bug here must cost the request its cache, not its answer.
            log.exception("cache lookup failed")
            self._reopen()
            return None

    def _lookup(
        self, fingerprint: bytes, blocks: Sequence[bytes], wanted: Callable[[EntryHeader], bool] | None
    ) -> Fetched | None:
        rid = self._next_id()
        started = time.perf_counter()
        if not self._send(CacheLookup(rid, fingerprint.hex(), list(blocks), self._wait_ms)):
            self._timed_out()
            return None
        reply = self._receive(rid)
        if reply is None:
            self._timed_out()
            return None
        self._health.answered()
        if not isinstance(reply, CacheHit):
            if not isinstance(reply, CacheMiss):
                log.warning("cache lookup got a %s before the hit; treating it as a miss", type(reply).__name__)
            return None
        hit = time.perf_counter()
        try:
            header = decode_header(reply.header)
        except CorruptEntry as err:
            self._corrupt(reply.key, err.reason)
            return None
        if wanted is not None and not wanted(header):
            return None
        decoder = PayloadDecoder(header)
        while True:
            chunk = self._receive(rid)
            if chunk is None:
                self._timed_out()
                return None
            if not isinstance(chunk, CacheChunk):
                # The cachekeeper found the entry damaged while reading it and gave up.
                log.info("cache entry %s: the transfer was aborted", reply.key)
                return None
            try:
                decoder.feed(chunk.data)
            except CorruptEntry as err:
                self._corrupt(reply.key, err.reason)
                return None
            if chunk.last:
                break
        received = time.perf_counter()
        try:
            state = decoder.finish()
        except CorruptEntry as err:
            self._corrupt(reply.key, err.reason)
            return None
        decoded = time.perf_counter()
        return Fetched(
            reply.key, header, state, (hit - started) * 1e3, (received - hit) * 1e3, (decoded - received) * 1e3
        )

    def report_corrupt(self, key: str, reason: str) -> None:
        """Tell the cachekeeper to delete an entry that turned out unusable."""
        log.warning("cache entry %s is unusable (%s); asking the cachekeeper to delete it", key, reason)
        try:
            self._send(CacheCorrupt(key, reason))
        except zmq.ZMQError as err:
            log.warning("could not report cache entry %s: %s", key, err)

    def _corrupt(self, key: str, reason: str) -> None:
        self.report_corrupt(key, reason)

    def _timed_out(self) -> None:
        self._reopen()
        self._health.failed("lookup")

    def _send(self, message: Message) -> bool:
        try:
            # A DEALER queues even with no cachekeeper; a full queue means it stopped reading.
            self._socket.send(protocol.encode(message), zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def _receive(self, rid: str) -> Reply | None:
        """Return the next reply for ``rid``, dropping stale ones; None after ``timeout``."""
        deadline = time.monotonic() + self._timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._socket.poll(max(1, round(remaining * 1000)), zmq.POLLIN):
                return None
            try:
                message = protocol.decode(self._socket.recv(zmq.NOBLOCK))
            except zmq.Again:
                continue
            except protocol.ProtocolError as err:
                log.warning("dropped a bad message from the cachekeeper: %s", err)
                continue
            if isinstance(message, (CacheHit, CacheMiss, CacheChunk)):
                if message.request_id == rid:
                    return message
                self._stale += 1  # the rest of an abandoned transfer: expected, not logged one by one
            else:
                log.warning("dropped %s from the cachekeeper: not a lookup reply", type(message).__name__)

    # -- saves -------------------------------------------------------------------------

    def save(
        self, tokens: Sequence[int], state: bytes | bytearray, done: Callable[[bool], None] | None = None,
        wait: float = 0.0, fingerprint: bytes | None = None,
    ) -> bool:
        """Queue a state for the uploader; False if it was dropped (then ``done`` is never called).

        ``done(stored)`` runs on the uploader thread once the cachekeeper has answered.
        ``wait`` is how long to wait for room in the queue. ``fingerprint`` files the
        entry under a cache scope's fingerprint (shared.prefix.scoped_fingerprint)
        instead of the model's.
        """
        if not self._health.usable():
            return False
        return self._uploader.submit(list(tokens), state, done, wait, fingerprint)

    def save_and_wait(
        self, tokens: Sequence[int], state: bytes | bytearray, fingerprint: bytes | None = None
    ) -> bool:
        """Store a state now; return whether the store holds it (bounded by the timeouts)."""
        finished = threading.Event()
        result: list[bool] = []

        def done(stored: bool) -> None:
            result.append(stored)
            finished.set()

        bound = upload_bound(self._timeout, len(state))
        if not self.save(tokens, state, done, wait=bound, fingerprint=fingerprint):
            return False
        # The uploader gives up by itself within bound (+ the one before us in the queue).
        finished.wait(bound * (self._pending + 1))
        return bool(result and result[0])

    def close(self, drain: float = 0.0) -> None:
        """Stop the uploader (queued saves are sent for up to ``drain`` s, then dropped) and close the sockets."""
        self._uploader.stop(drain)
        self._socket.close(linger=0)
        if self._stale:
            log.debug("dropped %d stale cache replies", self._stale)
