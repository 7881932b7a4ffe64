"""The dispatcher's socket loop: receive, decode, let the scheduler decide, send.

Two ROUTER sockets: the frontend, where gateways' DEALERs connect, and the
backend, where workers' DEALERs connect. A DEALER sends one frame, so every
message arrives as ``[identity, payload]`` and is answered the same way. All
decisions are in :class:`dispatcher.scheduler.Scheduler`; this module only
moves bytes.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Final

import zmq

from reame.dispatcher.scheduler import Scheduler
from reame.dispatcher.state import Dest, Send
from reame.shared import endpoints, protocol
from reame.shared.lifecycle import StopFlag

log = logging.getLogger(__name__)

# Sockets close with linger=0, except after the farewell: the SHUTTING_DOWN
# replies queued just before closing would otherwise be discarded. ROUTER drops
# what it cannot route, so this only waits on live but slow peers, and no longer.
FAREWELL_LINGER_MS: Final = 250
# Never sleep longer than a heartbeat interval, even if the wall clock is set back.
MAX_POLL_MS: Final = math.ceil(protocol.HEARTBEAT_INTERVAL_S * 1000)


def frontend_limit(max_body_bytes: int) -> int:
    """Return the largest message a gateway can send for a body of ``max_body_bytes``.

    msgpack is smaller than the JSON it comes from, except for numbers (``1`` is 1 byte
    of JSON, a float 9 of msgpack): 4x and a MiB covers a body of logit_bias entries.
    """
    return 4 * max_body_bytes + (1 << 20)


class Broker:
    """Own the frontend and backend sockets and run the mediation loop."""

    def __init__(
        self,
        frontend_address: str,
        backend_address: str,
        scheduler: Scheduler,
        *,
        keys: endpoints.LinkKeys = endpoints.PLAIN,  # CURVE for tcp:// addresses
        clock: Callable[[], float] = time.time,  # deadlines in Generate are Unix times
        max_request_bytes: int = -1,  # -1: no limit (see frontend_limit)
    ) -> None:
        self._addresses = {Dest.CLIENT: frontend_address, Dest.WORKER: backend_address}
        self._guard = endpoints.Guard(keys)
        self._scheduler = scheduler
        self._clock = clock
        self._context = zmq.Context()
        self._frontend = self._context.socket(zmq.ROUTER)
        self._backend = self._context.socket(zmq.ROUTER)
        for sock in (self._frontend, self._backend):
            sock.setsockopt(zmq.LINGER, 0)
        # ZeroMQ drops a bigger message (and its sender's connection) before it is read.
        self._frontend.setsockopt(zmq.MAXMSGSIZE, max_request_bytes)
        self._poller = zmq.Poller()
        self._poller.register(self._backend, zmq.POLLIN)
        self._poller.register(self._frontend, zmq.POLLIN)
        self._bound: list[str] = []
        self._linger_ms = 0

    def bind(self) -> None:
        """Bind both sockets; raise ``endpoints.BindError`` if one cannot."""
        for dest, sock in ((Dest.CLIENT, self._frontend), (Dest.WORKER, self._backend)):
            address = self._addresses[dest]
            side = "frontend" if dest is Dest.CLIENT else "backend"
            endpoints.bind(sock, address, f"the {side}", self._guard)
            self._bound.append(address)

    def run(self, stop: StopFlag) -> None:
        """Mediate until ``stop`` is set, then fail every pending request with SHUTTING_DOWN."""
        while not stop.is_set:
            self.mediate()
        self._perform(self._scheduler.shutdown())
        self._linger_ms = FAREWELL_LINGER_MS

    def mediate(self) -> None:
        """Run one round of the loop, as the ZeroMQ guide's broker does."""
        events = dict(self._poller.poll(self._poll_timeout_ms()))
        if events.get(self._backend):
            self.handle_backend()
        if events.get(self._frontend):
            self.handle_frontend()
        self.purge_expired()
        self.send_heartbeats()

    def handle_backend(self) -> None:
        """Take one message from a worker."""
        received = self._receive(self._backend, "worker")
        if received is not None:
            identity, message = received
            self._perform(self._scheduler.worker_message(identity, message, self._clock()))

    def handle_frontend(self) -> None:
        """Take one message from a gateway."""
        received = self._receive(self._frontend, "client")
        if received is not None:
            identity, message = received
            self._perform(self._scheduler.client_message(identity, message, self._clock()))

    def purge_expired(self) -> None:
        """Drop silent workers and time out queued requests past their deadline."""
        self._perform(self._scheduler.purge_expired(self._clock()))

    def send_heartbeats(self) -> None:
        """Heartbeat workers and waiting clients if an interval has passed."""
        self._perform(self._scheduler.heartbeats(self._clock()))

    def close(self) -> None:
        """Close both sockets, terminate the context and remove our ipc socket files."""
        for sock in (self._frontend, self._backend):
            sock.close(linger=self._linger_ms)
        self._guard.close()
        self._context.term()
        for address in self._bound:
            endpoints.cleanup(address)
        self._bound.clear()

    def _poll_timeout_ms(self) -> int:
        wait = self._scheduler.next_heartbeat_at - self._clock()
        return min(max(0, math.ceil(wait * 1000)), MAX_POLL_MS)

    def _receive(self, sock: zmq.Socket[bytes], side: str) -> tuple[bytes, protocol.Message] | None:
        frames = sock.recv_multipart()
        if len(frames) != 2:
            log.warning("dropped a %d-frame message from a %s: expected [identity, payload]",
                        len(frames), side)
            return None
        identity, payload = frames
        try:
            return identity, protocol.decode(payload)
        except protocol.ProtocolError as err:
            log.warning("dropped a bad message from %s %r: %s", side, identity, err)
            return None

    def _perform(self, sends: Iterable[Send]) -> None:
        for send in sends:
            sock = self._frontend if send.dest is Dest.CLIENT else self._backend
            # ROUTER never blocks here: a message to a peer that is gone or whose
            # queue is full is dropped, and heartbeats account for lost peers.
            sock.send_multipart([send.identity, protocol.encode(send.message)])
