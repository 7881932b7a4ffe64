"""The worker's connection to the dispatcher, served by an I/O thread of its own.

Heartbeats come from this thread, so a long prefill on the engine thread is
never mistaken for a dead worker (the ZeroMQ guide's paranoid pirate, with the
socket owned by a dedicated thread).

Thread ownership: the I/O thread owns the DEALER socket and one end of an
inproc PAIR. The engine thread owns the other end and calls only
:meth:`Link.send`, :meth:`Link.next_job` and :meth:`Link.close`. Requests go to
the engine through a queue, each with the Event that cancels it; outgoing
messages come back through the PAIR, tagged so the I/O thread knows when the
current request has ended.

While a request runs, Ready is never sent: the dispatcher would take it as "idle"
and send the next Generate at once. A Disconnect (the dispatcher does not know
us) or a reconnect (the dispatcher went silent) during a request cancels that
request, drops its remaining output (nobody is waiting for it) and sends Ready
once it has ended.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from typing import Final

import zmq

from reame.shared import endpoints, protocol, upstream
from reame.shared.protocol import (
    HEARTBEAT_INTERVAL_S,
    HEARTBEAT_LIVENESS,
    Cancel,
    Disconnect,
    Done,
    Error,
    ErrorCode,
    Generate,
    Heartbeat,
    Message,
    Ready,
    Threads,
)

log = logging.getLogger(__name__)

# Frames on the inproc PAIR: [tag, payload].
_DATA: Final = b"d"  # a message of the current request
_LAST: Final = b"l"  # its final message (Done or Error)
_QUIT: Final = b"q"  # say goodbye to the dispatcher and stop

# Long enough to hand the final Error/Disconnect to a live dispatcher, short
# enough that a dead one never holds up shutdown.
FAREWELL_LINGER_MS: Final = 250
MAX_THREADS: Final = 1024  # a share beyond any machine is a bad message, not an order
_JOIN_TIMEOUT_S: Final = 5.0
_pair_ids = itertools.count()


@dataclasses.dataclass(frozen=True)
class Job:
    """A request for the engine and the Event that cancels it."""

    request: Generate
    cancel: threading.Event


class Link:
    """Connect to the dispatcher, announce the worker and keep the connection alive."""

    def __init__(
        self,
        context: zmq.Context[zmq.Socket[bytes]],
        address: str,
        hello: Ready,
        *,
        interval: float = HEARTBEAT_INTERVAL_S,  # tests shorten these
        liveness: int = HEARTBEAT_LIVENESS,
        on_threads: Callable[[int], None] | None = None,
        keys: endpoints.LinkKeys = endpoints.PLAIN,  # CURVE for a tcp:// address
    ) -> None:
        self._context = context
        self._keys = keys
        self._on_threads = on_threads  # called on the I/O thread with the dispatcher's share
        self._address = address
        self._hello = hello
        self._interval = interval
        self._silence_limit = liveness * interval
        self._jobs: queue.Queue[Job] = queue.Queue()
        endpoint = f"inproc://reame-worker-link-{next(_pair_ids)}"
        self._outbox = context.socket(zmq.PAIR)  # engine thread's end
        self._outbox.setsockopt(zmq.LINGER, 0)
        self._outbox.bind(endpoint)
        self._inbox = context.socket(zmq.PAIR)  # I/O thread's end
        self._inbox.setsockopt(zmq.LINGER, 0)
        self._inbox.connect(endpoint)
        self._thread = threading.Thread(target=self._run, name="link", daemon=True)
        self._failed = False
        # I/O thread state from here on.
        self._dealer: zmq.Socket[bytes] | None = None
        self._poller = zmq.Poller()
        self._poller.register(self._inbox, zmq.POLLIN)
        self._current: str | None = None
        self._cancel: threading.Event | None = None
        self._orphaned = False  # the current request's dispatcher forgot it
        self._owe_ready = False
        self._last_heard = 0.0
        self._next_heartbeat = 0.0
        self._warned_silence = False

    # -- engine thread ---------------------------------------------------------------

    def start(self) -> None:
        """Connect, send Ready and start the I/O thread."""
        self._thread.start()

    @property
    def alive(self) -> bool:
        """False once the I/O thread has failed or stopped."""
        return self._thread.is_alive() and not self._failed

    def next_job(self, timeout: float) -> Job | None:
        """Return the next request to serve, or None after ``timeout`` seconds."""
        try:
            return self._jobs.get(timeout=timeout)
        except queue.Empty:
            return None

    def send(self, message: Message) -> None:
        """Hand an outgoing message of the current request to the I/O thread."""
        tag = _LAST if isinstance(message, (Done, Error)) else _DATA
        self._outbox.send_multipart([tag, protocol.encode(message)])

    def close(self) -> None:
        """Send Disconnect after everything already sent, stop the thread, close the sockets."""
        if self._thread.is_alive():
            self._outbox.send_multipart([_QUIT, b""])
            self._thread.join(_JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                log.warning("the link thread did not stop within %.0f s", _JOIN_TIMEOUT_S)
        self._outbox.close(linger=0)

    def drain_jobs(self) -> list[Job]:
        """Take the jobs accepted but not started (at shutdown)."""
        jobs = []
        while True:
            try:
                jobs.append(self._jobs.get_nowait())
            except queue.Empty:
                return jobs

    # -- I/O thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._connect()
            while True:
                wait_ms = math.ceil(max(0.0, self._next_heartbeat - time.monotonic()) * 1000.0)
                events = dict(self._poller.poll(wait_ms))
                if events.get(self._inbox) and self._forward_outbox():
                    return
                if self._dealer is not None and events.get(self._dealer):
                    self._receive(self._dealer)
                self._tick(time.monotonic())
        except Exception:
            self._failed = True
            log.exception("the link to the dispatcher failed")
        finally:
            self._close_dealer(FAREWELL_LINGER_MS)
            self._inbox.close(linger=0)

    def _connect(self) -> None:
        """Open a fresh DEALER (a new identity for the dispatcher) and announce ourselves.

        The old socket, if any, says Disconnect first. Its connection may be alive after
        all: a link that comes back late in a silence window attaches that socket, and the
        dispatcher's first heartbeat can come after the window closes. The dispatcher then
        drops that identity at once instead of giving it requests until it misses its
        heartbeats (one such request waited the whole liveness after a link flap).
        """
        if self._dealer is not None:
            self._send(Disconnect())
        self._close_dealer(FAREWELL_LINGER_MS)
        dealer = upstream.dealer(self._context, self._address, self._keys)
        self._dealer = dealer
        self._poller.register(dealer, zmq.POLLIN)
        now = time.monotonic()
        self._last_heard = now
        self._next_heartbeat = now + self._interval
        self._announce()

    def _close_dealer(self, linger_ms: int) -> None:
        if self._dealer is not None:
            self._poller.unregister(self._dealer)
            self._dealer.close(linger=linger_ms)
            self._dealer = None

    def _announce(self) -> None:
        """Send Ready now if idle; otherwise abandon the current request and send it after."""
        if self._current is None:
            self._owe_ready = False
            self._send(self._hello)
            return
        log.info("request %s is abandoned: the dispatcher no longer knows this worker", self._current)
        self._owe_ready = True
        self._orphaned = True
        if self._cancel is not None:
            self._cancel.set()

    def _send(self, message: Message) -> None:
        self._send_payload(protocol.encode(message), type(message).__name__)

    def _send_payload(self, payload: bytes, what: str) -> None:
        if self._dealer is None:
            return
        try:
            # Never block the I/O thread: with the dispatcher gone the queue fills,
            # and liveness will notice the silence and reconnect.
            self._dealer.send(payload, zmq.NOBLOCK)
        except zmq.Again:
            log.warning("dropped an outgoing %s: the dispatcher is not taking messages", what)

    def _forward_outbox(self) -> bool:
        """Forward everything the engine has sent; True when asked to quit."""
        while True:
            try:
                tag, payload = self._inbox.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return False
            if tag == _QUIT:
                self._send(Disconnect())
                return True
            if not self._orphaned:
                self._send_payload(payload, "reply")
            if tag == _LAST:
                self._current = None
                self._cancel = None
                self._orphaned = False
                if self._owe_ready:
                    self._announce()

    def _receive(self, dealer: zmq.Socket[bytes]) -> None:
        """Handle every message waiting on the DEALER."""
        while True:
            try:
                payload = dealer.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._last_heard = time.monotonic()
            self._warned_silence = False
            try:
                message = protocol.decode(payload)
            except protocol.ProtocolError as err:
                log.warning("dropped a bad message from the dispatcher: %s", err)
                continue
            if isinstance(message, Generate):
                self._accept(message)
            elif isinstance(message, Cancel):
                if message.request_id == self._current and self._cancel is not None:
                    self._cancel.set()
                else:
                    log.debug("ignored a cancel for %s: not the current request", message.request_id)
            elif isinstance(message, Heartbeat):
                pass
            elif isinstance(message, Threads):
                if self._on_threads is not None and 1 <= message.threads <= MAX_THREADS:
                    self._on_threads(message.threads)
            elif isinstance(message, Disconnect):
                self._announce()
            else:
                log.warning("dropped %s from the dispatcher: workers do not take it", type(message).__name__)

    def _accept(self, request: Generate) -> None:
        if self._current is not None:
            log.error("got request %s while serving %s", request.request_id, self._current)
            self._send(
                Error(request.request_id, ErrorCode.INTERNAL, "the worker was already busy with another request")
            )
            return
        self._current = request.request_id
        self._cancel = threading.Event()
        self._jobs.put(Job(request, self._cancel))

    def _tick(self, now: float) -> None:
        """Heartbeat when due; reconnect when the dispatcher has been silent too long."""
        if now >= self._next_heartbeat:
            self._send(Heartbeat())
            self._next_heartbeat = now + self._interval
        if now - self._last_heard > self._silence_limit:
            if not self._warned_silence:
                log.warning(
                    "no word from the dispatcher at %s for %.1f s; reconnecting", self._address, self._silence_limit
                )
                self._warned_silence = True
            self._connect()
