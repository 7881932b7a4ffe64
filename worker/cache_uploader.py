"""Send saved KV states to the cachekeeper from a thread of their own.

A save happens after the reply's last token has gone out, so no client waits for
it; the engine thread only copies the state out and queues it here. The queue is
small (each item is a whole state): a save that does not fit is dropped, the
prompt will simply be saved by a later request. The thread owns its DEALER socket.

A save is a CachePut, the raw state in CacheChunks (the last one marked), then the
cachekeeper's CacheStored. A CacheStored that comes before the chunks are all sent
(a refusal: too big, already stored) ends the sending early.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Final

import zmq

from reame.shared import endpoints, protocol, upstream
from reame.shared.kv_entry import CHUNK_BYTES
from reame.shared.protocol import CacheChunk, CachePut, CacheStored, Message
from reame.worker.cache_health import Health

log = logging.getLogger(__name__)

# The cachekeeper compresses and fsyncs the state before it answers: allow for that
# at a rate any disk meets, on top of the usual timeout.
MIN_STORE_RATE: Final = 50e6  # bytes per second
# CacheStored reasons saying the entry is (or is being) stored by another put: success,
# but not a save of ours.
ALREADY_STORED: Final = frozenset({"present", "in_progress"})
_STOP_POLL_S: Final = 0.1  # how often a long wait looks at the stop flag
_JOIN_TIMEOUT_S: Final = 5.0


def upload_bound(timeout: float, size: int) -> float:
    """Return the longest a save of ``size`` bytes may take before it counts as failed."""
    return 2 * timeout + size / MIN_STORE_RATE


@dataclasses.dataclass(frozen=True, slots=True)
class Save:
    """A state to store: the tokens it covers, the raw bytes, whom to tell."""

    tokens: list[int]
    state: bytes | bytearray
    done: Callable[[bool], None] | None
    fingerprint: str | None = None  # hex; None: the model's own (the shared cache scope)


class Uploader:
    """A thread that stores queued states at the cachekeeper, one at a time."""

    def __init__(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        address: str,
        fingerprint: str,
        kv_type: str,
        timeout: float,
        health: Health,
        next_id: Callable[[], str],
        pending: int,
        keys: endpoints.LinkKeys = endpoints.PLAIN,
    ) -> None:
        self._context = context
        self._address = address
        self._keys = keys
        self._fingerprint = fingerprint
        self._kv_type = kv_type
        self._timeout = timeout
        self._health = health
        self._next_id = next_id
        self._queue: queue.Queue[Save | None] = queue.Queue(maxsize=pending)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cache-uploader", daemon=True)
        self._socket: zmq.Socket[bytes] | None = None  # the uploader thread's

    def start(self) -> None:
        self._thread.start()

    def submit(self, tokens: list[int], state: bytes | bytearray, done: Callable[[bool], None] | None,
               wait: float, fingerprint: bytes | None = None) -> bool:
        """Queue a save; False if the queue stayed full for ``wait`` seconds or we are stopping."""
        if self._stopping.is_set() or not self._thread.is_alive():
            return False
        item = Save(tokens, state, done, None if fingerprint is None else fingerprint.hex())
        try:
            self._queue.put(item, block=wait > 0, timeout=wait if wait > 0 else None)
        except queue.Full:
            log.debug("dropped the save of a %d-token prompt: %d saves are pending", len(tokens), self._queue.maxsize)
            return False
        return True

    def stop(self, drain: float = 0.0) -> None:
        """Send the queued saves for up to ``drain`` seconds; drop the rest, let the current one give up, wait.

        A worker stopped right after a reply has its prompt's chunks still queued: a
        graceful stop sends them rather than read those documents again after the restart.
        """
        if drain > 0 and self._thread.is_alive():
            deadline = time.monotonic() + drain
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=drain)  # behind the queued saves: the thread ends after them
                self._thread.join(max(0.0, deadline - time.monotonic()))
        self._stopping.set()
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None and item.done is not None:
                item.done(False)
        # Only wakes the thread: it stops at the next item it takes, whatever that is.
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        if self._thread.is_alive():
            self._thread.join(_JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning("the cache uploader did not stop within %.0f s", _JOIN_TIMEOUT_S)

    # -- uploader thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is None or self._stopping.is_set():
                    if item is not None and item.done is not None:
                        item.done(False)
                    return
                stored = False
                try:
                    stored = self._upload(item)
                except zmq.ZMQError as err:
                    log.warning("cache save failed: %s", err)
                    self._reopen()
                    self._health.failed("save")
                except Exception:
                    log.exception("cache save failed")
                if item.done is not None:
                    item.done(stored)
        finally:
            if self._socket is not None:
                self._socket.close(linger=0)
                self._socket = None

    def _open(self) -> zmq.Socket[bytes]:
        if self._socket is None:
            self._socket = upstream.dealer(self._context, self._address, self._keys)
        return self._socket

    def _reopen(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None

    def _upload(self, item: Save) -> bool:
        """Send one state and wait for the verdict; True if the store holds the prefix."""
        if not self._health.usable():
            return False
        socket = self._open()
        rid = self._next_id()
        size = len(item.state)
        started = time.perf_counter()
        reply: CacheStored | None = None
        fingerprint = item.fingerprint or self._fingerprint
        if not self._send(socket, CachePut(rid, fingerprint, self._kv_type, item.tokens, size)):
            return self._timed_out(len(item.tokens))
        view = memoryview(item.state)
        for offset in range(0, size, CHUNK_BYTES):
            end = min(offset + CHUNK_BYTES, size)
            if not self._send(socket, CacheChunk(rid, bytes(view[offset:end]), end == size)):
                return self._timed_out(len(item.tokens))
            reply = self._take_reply(socket, rid, 0.0)
            if reply is not None:
                break  # answered before it was all sent: refused, or already stored
        if reply is None:
            reply = self._take_reply(socket, rid, upload_bound(self._timeout, size))
        if reply is None:
            return self._timed_out(len(item.tokens))
        self._health.answered()
        elapsed_ms = (time.perf_counter() - started) * 1e3
        if reply.stored and reply.reason not in ALREADY_STORED:
            log.debug("stored the state of a %d-token prompt (%d bytes) in %.0f ms", len(item.tokens), size, elapsed_ms)
            return True
        if reply.reason in ALREADY_STORED:
            log.debug("the state of a %d-token prompt was stored already (%s)", len(item.tokens), reply.reason)
            return True
        log.debug("the cachekeeper did not store a %d-token prompt: %s", len(item.tokens), reply.reason)
        return False

    def _send(self, socket: zmq.Socket[bytes], message: Message) -> bool:
        try:
            socket.send(protocol.encode(message), zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def _take_reply(self, socket: zmq.Socket[bytes], rid: str, wait: float) -> CacheStored | None:
        """Return the CacheStored for ``rid`` if it comes within ``wait`` seconds (0: only if already here)."""
        deadline = time.monotonic() + wait
        while True:
            remaining = deadline - time.monotonic()
            if self._stopping.is_set() and wait > 0:
                return None
            slice_ms = max(0, min(round(remaining * 1000), round(_STOP_POLL_S * 1000)))
            if not socket.poll(slice_ms, zmq.POLLIN):
                if remaining <= 0:
                    return None
                continue
            try:
                message = protocol.decode(socket.recv(zmq.NOBLOCK))
            except zmq.Again:
                continue
            except protocol.ProtocolError as err:
                log.warning("dropped a bad message from the cachekeeper: %s", err)
                continue
            if isinstance(message, CacheStored) and message.request_id == rid:
                return message
            log.debug("dropped a stale %s from the cachekeeper", type(message).__name__)

    def _timed_out(self, n_tokens: int) -> bool:
        log.debug("gave up saving a %d-token prompt: the cachekeeper did not answer", n_tokens)
        self._reopen()
        if not self._stopping.is_set():
            self._health.failed("save")
        return False
