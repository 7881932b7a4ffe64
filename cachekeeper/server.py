"""The cachekeeper's socket loop: answer lookups, collect puts, run admin commands.

One ROUTER socket, where the workers' (and `reame cache`'s) DEALERs connect: every
message arrives as ``[identity, payload]`` and is answered the same way. A hit is
streamed as CacheChunks of 1 MiB, one chunk per transfer per turn of the loop, so
a 40 MB transfer to one worker does not hold up another worker's lookup. Puts
are collected by :class:`cachekeeper.puts.PartialPuts` and compressed and
written by :class:`cachekeeper.writer.Writer` on its own thread. A lookup that a
put under way would answer better than the store waits for it
(:class:`cachekeeper.pending.Pending`), so a document is not read twice because
its state was still on its way to the disk; with a shared tier (cachekeeper.tier),
a lookup waits the same way for a fetch from it, on the tier's thread.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Final

import zmq

from reame.cachekeeper import writer as w
from reame.cachekeeper.answers import AnswerStore, answer
from reame.cachekeeper.pending import Parked, Pending, PutId, check_lookup
from reame.cachekeeper.puts import Accepted, Failed, FinishedPut, PartialPuts, Progress, Reason
from reame.cachekeeper.store import ReadHandle, Store
from reame.cachekeeper.tier import SharedTier
from reame.shared import endpoints
from reame.shared import protocol as p
from reame.shared.kv_entry import CorruptEntry
from reame.shared.lifecycle import StopFlag
from reame.shared.prefix import block_hashes, is_entry_key

log = logging.getLogger(__name__)

# How long the loop sleeps when idle: how late a stop request can be noticed.
POLL_MS: Final = 100
# Messages taken per turn before the next round of chunks goes out: a put's 40
# chunks come in quickly, and a transfer still moves on every turn.
BATCH: Final = 64
# How long shutdown waits for the write (or verify step) under way.
WRITER_GRACE_S: Final = 10.0
_REASON_CHARS: Final = 200


@dataclasses.dataclass
class Counters:
    """Since start: compressed payload bytes streamed, entry bytes committed, lookups parked."""

    bytes_read: int = 0
    bytes_written: int = 0
    lookup_waits: int = 0
    save_seconds: float = 0.0  # compressing and writing entries (the writer thread)
    restore_seconds: float = 0.0  # from each hit to the last chunk of its entry sent


@dataclasses.dataclass
class _Transfer:
    identity: bytes
    request_id: str
    handle: ReadHandle
    chunks: Iterator[bytes]
    sent: int = 0
    started: float = dataclasses.field(default_factory=time.monotonic)


class Keeper:
    """Own the store, the ROUTER socket and the writer thread; run the loop."""

    def __init__(
        self, store: Store, address: str, *, block_tokens: int, level: int,
        keys: endpoints.LinkKeys = endpoints.PLAIN, clock: Callable[[], float] = time.monotonic,
        answers: AnswerStore | None = None, shared: SharedTier | None = None,
    ) -> None:
        self._store = store
        self._answers = answers  # None: cache.answers = false
        self._shared = shared  # None: cache.shared_url is empty
        self._block_tokens = block_tokens
        self._address = address
        self._guard = endpoints.Guard(keys)  # CURVE when the address is tcp://
        self._clock = clock
        self._puts = PartialPuts(store.max_bytes)
        self._pending = Pending()
        self._writer = w.Writer(store, block_tokens=block_tokens, level=level)
        self._transfers: list[_Transfer] = []
        self.counters = Counters()
        self._context = zmq.Context()
        self._router = self._context.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._poller = zmq.Poller()
        self._poller.register(self._router, zmq.POLLIN)
        self._poller.register(self._writer.fd, zmq.POLLIN)
        if shared is not None:
            self._poller.register(shared.fd, zmq.POLLIN)
        self._bound = False

    def bind(self) -> None:
        """Listen on the address; raise ``endpoints.BindError`` if impossible."""
        endpoints.bind(self._router, self._address, "the cachekeeper", self._guard)
        self._bound = True

    def run(self, stop: StopFlag) -> None:
        """Serve until ``stop`` is set."""
        self._writer.start()
        if self._shared is not None:
            self._shared.start()
        while not stop.is_set:
            self.turn()

    def turn(self) -> None:
        """Run one round of the loop: requests, finished writes, a chunk per transfer, expiry."""
        events = dict(self._poller.poll(0 if self._transfers else self._idle_ms()))
        if events.get(self._router):
            self.handle_requests()
        if events.get(self._writer.fd):
            self.collect_results()
        if self._shared is not None and events.get(self._shared.fd):
            for fetched in self._shared.results():  # answered from the store: the fetched entry, if stored
                self._put_ended(fetched.put)
        self.stream_chunks()
        self.expire_puts()
        self.expire_lookups()

    def _idle_ms(self) -> int:
        # A parked lookup is answered when its patience ends, not up to POLL_MS later.
        deadline = self._pending.next_deadline()
        if deadline is None:
            return POLL_MS
        return max(0, min(POLL_MS, math.ceil((deadline - self._clock()) * 1000)))

    def handle_requests(self) -> None:
        """Take up to BATCH messages waiting on the socket."""
        for _ in range(BATCH):
            try:
                frames = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2:
                log.warning("dropped a %d-frame message: expected [identity, payload]", len(frames))
                continue
            identity, payload = frames
            try:
                message = p.decode(payload)
            except p.ProtocolError as err:
                log.warning("dropped a bad message from %r: %s", identity, err)
                continue
            try:
                self.handle(identity, message)
            except (OSError, sqlite3.Error) as err:
                # The disk or the index failed under us: this request goes unanswered
                # (workers give up after cache.timeout), the next one may succeed.
                log.error("cache store error on a %s from %r: %s", type(message).__name__, identity, err)

    def handle(self, identity: bytes, message: p.Message) -> None:
        """Act on one message."""
        if isinstance(message, p.CacheLookup):
            self.lookup(identity, message)
        elif isinstance(message, p.CachePut):
            self.begin_put(identity, message)
        elif isinstance(message, p.CacheChunk):
            self.put_chunk(identity, message)
        elif isinstance(message, p.CacheCorrupt):
            self.corrupt(message)
        elif isinstance(message, p.CacheAdmin):
            self.admin(identity, message)
        elif isinstance(message, (p.AnswerLookup, p.AnswerPut)):
            # Answers are a few KB: read and written here, between two chunks of a transfer.
            reply = answer(self._answers, message)
            if reply is not None:
                self._send(identity, reply)
        else:
            log.warning("dropped a %s from %r: not a cachekeeper message", type(message).__name__, identity)

    # -- lookups -------------------------------------------------------------

    def lookup(self, identity: bytes, lookup: p.CacheLookup) -> None:
        """Answer CacheMiss, or CacheHit and start streaming the entry, or park the lookup."""
        # A worker asks one thing at a time: a new lookup means it gave up on the last.
        self._end_transfers(identity)
        self._pending.cancel(identity)
        fingerprint = check_lookup(lookup)
        if isinstance(fingerprint, str):
            log.warning("bad lookup %s from %r: %s", lookup.request_id, identity, fingerprint)
            self._send(identity, p.CacheMiss(lookup.request_id))
            return

        def store_depth() -> int:
            match = self._store.lookup(fingerprint, lookup.blocks, peek=True)
            return 0 if match is None else match.depth

        if self._shared is not None and self._shared.usable():
            self._ask_shared(self._shared, fingerprint, lookup.blocks, store_depth())
        if self._pending.park(identity, lookup, fingerprint, store_depth, self._clock()):
            self.counters.lookup_waits += 1
            log.debug("lookup %s from %r waits for a put under way", lookup.request_id, identity)
            return
        self.answer(identity, lookup, fingerprint)

    def _ask_shared(self, shared: SharedTier, fingerprint: bytes, blocks: list[bytes], depth: int) -> None:
        """Fetch what the shared tier may hold deeper than the store, filed as a put under way."""
        under_way = self._pending.deepest_put(fingerprint, blocks)
        if under_way is not None and under_way[1] == len(blocks):
            return  # a save or a fetch under way covers the whole lookup
        fetch = shared.fetch(fingerprint, blocks, depth)
        if fetch is not None:
            self._pending.add_put(fetch, fingerprint, blocks)

    def answer(self, identity: bytes, lookup: p.CacheLookup, fingerprint: bytes) -> None:
        """Answer a checked lookup from the store as it is now."""
        try:
            match = self._store.lookup(fingerprint, lookup.blocks)
            handle = None if match is None else self._store.open_read(match.key)
        except (OSError, sqlite3.Error) as err:
            log.error("cache lookup %s failed: %s", lookup.request_id, err)
            match = handle = None
        if match is None or handle is None:
            self._send(identity, p.CacheMiss(lookup.request_id))
            return
        self._send(identity, p.CacheHit(lookup.request_id, match.key, handle.header.encode(), match.matched_tokens))
        self._transfers.append(_Transfer(identity, lookup.request_id, handle, handle.chunks()))

    def stream_chunks(self) -> None:
        """Send the next chunk of every transfer under way."""
        for transfer in list(self._transfers):
            payload_len = transfer.handle.header.payload_len
            try:
                chunk = next(transfer.chunks, b"")
            except (CorruptEntry, OSError) as err:
                # A corrupt entry is already deleted and counted by the store.
                log.warning("aborting transfer of %s to %r: %s", transfer.handle.key, transfer.identity, err)
                self._send(transfer.identity, p.CacheMiss(transfer.request_id))
                self._finish(transfer)
                continue
            transfer.sent += len(chunk)
            self.counters.bytes_read += len(chunk)
            last = transfer.sent >= payload_len
            self._send(transfer.identity, p.CacheChunk(transfer.request_id, chunk, last))
            if last:
                self.counters.restore_seconds += time.monotonic() - transfer.started
            if last or not chunk:
                self._finish(transfer)

    def _finish(self, transfer: _Transfer) -> None:
        transfer.handle.close()
        self._transfers.remove(transfer)

    def _end_transfers(self, identity: bytes) -> None:
        for transfer in [t for t in self._transfers if t.identity == identity]:
            self._finish(transfer)

    def expire_lookups(self) -> None:
        """Answer the parked lookups whose patience ran out with what the store has."""
        self._answer_parked(self._pending.expire(self._clock()))

    def _put_ended(self, put: PutId) -> None:
        self._answer_parked(self._pending.finish_put(put))

    def _answer_parked(self, released: list[Parked]) -> None:
        for parked in released:
            try:
                self.answer(parked.identity, parked.lookup, parked.fingerprint)
            except (OSError, sqlite3.Error) as err:
                # As in handle_requests: this one goes unanswered, the others are still answered.
                log.error("cache lookup %s failed: %s", parked.lookup.request_id, err)

    # -- puts ----------------------------------------------------------------

    def begin_put(self, identity: bytes, put: p.CachePut) -> None:
        """Start collecting a put, or refuse it at once (already stored, too big, too many)."""
        accepted = self._puts.begin(identity, put, self._clock())
        if isinstance(accepted, Accepted) and self._store.contains(accepted.key):
            self._puts.drop(identity, put.request_id)
            self._put_ended((identity, put.request_id))  # a restarted put of the same id
            self._send(identity, p.CacheStored(put.request_id, True, w.PRESENT_REASON))
        elif isinstance(accepted, Reason):
            if accepted is Reason.INVALID:
                log.warning("refused a malformed put %s from %r", put.request_id, identity)
            self._put_ended((identity, put.request_id))
            self._send(identity, p.CacheStored(put.request_id, False, accepted.value))
        else:
            # check_put vouched for the fingerprint and the token ids.
            fingerprint = bytes.fromhex(put.fingerprint)
            chain = block_hashes(fingerprint, put.tokens, self._block_tokens)
            self._pending.add_put((identity, put.request_id), fingerprint, chain)

    def put_chunk(self, identity: bytes, chunk: p.CacheChunk) -> None:
        """Add a chunk to its put; hand a finished put to the writer."""
        outcome = self._puts.feed(identity, chunk, self._clock())
        if isinstance(outcome, FinishedPut):
            self._writer.submit(outcome)
        elif isinstance(outcome, Failed):
            log.warning("put %s from %r failed: %s", outcome.request_id, identity, outcome.reason)
            self._send(identity, p.CacheStored(outcome.request_id, False, outcome.reason.value))
            self._put_ended((identity, outcome.request_id))
        elif outcome is Progress.UNKNOWN:
            # The rest of a put refused at its start: expected, and not worth a line each.
            log.debug("dropped a chunk of %s from %r: no such put", chunk.request_id, identity)

    def expire_puts(self) -> None:
        for identity, failed in self._puts.expire(self._clock()):
            log.warning("dropped put %s from %r: no chunk for a while", failed.request_id, identity)
            self._send(identity, p.CacheStored(failed.request_id, False, failed.reason.value))
            self._put_ended((identity, failed.request_id))

    def collect_results(self) -> None:
        """Answer the puts and admin commands the writer has finished."""
        for result in self._writer.results():
            if isinstance(result, w.PutResult):
                self._puts.written()
                self.counters.bytes_written += result.bytes_written
                self.counters.save_seconds += result.seconds
                self._send(result.identity, p.CacheStored(result.request_id, result.stored, result.reason))
                if self._shared is not None and result.bytes_written:
                    self._shared.push(result.key)  # committed now, so a lookup elsewhere may find it
                # Committed (or refused) before these answers: a hit on the new entry if it was stored.
                self._put_ended((result.identity, result.request_id))
            else:
                self._send(result.identity, self.report(result.request_id, result.removed))

    # -- the rest --------------------------------------------------------------

    def corrupt(self, message: p.CacheCorrupt) -> None:
        """Delete an entry a worker could not use."""
        if not is_entry_key(message.key):
            log.warning("ignored a corruption report for %r: not an entry key", message.key[:80])
            return
        self._store.delete(message.key, f"reported by a worker: {message.reason[:_REASON_CHARS]}")

    def admin(self, identity: bytes, admin: p.CacheAdmin) -> None:
        """Report stats now; verify and purge on the writer thread, after the writes queued before."""
        if admin.command is p.CacheCommand.STATS:
            self._send(identity, self.report(admin.request_id, []))
        else:
            if admin.command is p.CacheCommand.PURGE and self._answers is not None:
                self._answers.purge()
            self._writer.submit(w.AdminJob(identity, admin.request_id, admin.command))

    def report(self, request_id: str, removed: list[str]) -> p.CacheReport:
        stats = self._store.stats()
        return p.CacheReport(
            request_id, stats.entries, stats.bytes, stats.max_bytes, stats.hits, stats.misses, stats.evictions,
            stats.corrupt, self.counters.bytes_read, self.counters.bytes_written, removed,
            self.counters.lookup_waits, self.counters.save_seconds, self.counters.restore_seconds,
            *self._answer_counts(), shared=None if self._shared is None else self._shared.report(),
        )

    def _answer_counts(self) -> tuple[int, int, int, int]:
        if self._answers is None:
            return 0, 0, 0, 0
        a = self._answers.stats()
        return a.entries, a.bytes, a.hits, a.misses

    def _send(self, identity: bytes, message: p.Message) -> None:
        # ROUTER drops what it cannot route (a worker that is gone): never blocks here.
        self._router.send_multipart([identity, p.encode(message)])

    def close(self) -> None:
        """Stop the writer, drop unfinished work, close the store and the socket."""
        writer_stopped = self._writer.stop(WRITER_GRACE_S)
        # The tier's fetch thread may be committing an entry too.
        writer_stopped = (self._shared is None or self._shared.stop(WRITER_GRACE_S)) and writer_stopped
        for transfer in list(self._transfers):
            self._finish(transfer)
        dropped = self._puts.clear()
        self._pending.clear()  # their workers stop waiting after cache.timeout
        if dropped:
            log.info("dropped %d unfinished put(s)", dropped)
        if writer_stopped:
            self._store.close()
        else:
            # Closing the index under a running write would break it; exiting releases the lock.
            log.warning("the cache writer is still busy after %.0f s: leaving the store as it is", WRITER_GRACE_S)
        self._router.close(linger=0)
        self._guard.close()
        self._context.term()
        if self._bound:
            endpoints.cleanup(self._address)
            self._bound = False
