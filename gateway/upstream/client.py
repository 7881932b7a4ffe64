"""The gateway's side of the dispatcher's frontend: a DEALER socket per HTTP request.

One :class:`Dispatcher` per gateway process owns its :class:`~reame.shared.upstream.Upstream`
(the ZeroMQ context: contexts are thread-safe, sockets are not), and every request
thread opens its own socket, so replies never need routing inside the gateway. The
status query and the cache probe are Upstream round trips. A :class:`Call` is one Generate in
flight: :meth:`Call.next` returns its Deltas and finally its Done, and turns an
Error message or a silent dispatcher into an :class:`~gateway.http.errors.APIError`.

While a call waits (queued, or in a long prefill) nothing is written to the HTTP
client, so a client that hangs up would go unnoticed until the whole answer is
generated for nobody. About once per heartbeat interval the call therefore asks
its ``abandoned`` probe whether the client is still there, and raises
:class:`ClientGone` if not; closing the call then cancels the request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Final

import zmq

from reame.gateway.http import errors
from reame.gateway.http.errors import APIError
from reame.gateway.upstream.cache_probe import CacheProbe
from reame.shared import endpoints, protocol
from reame.shared.protocol import HEARTBEAT_INTERVAL_S, HEARTBEAT_LIVENESS
from reame.shared.upstream import Upstream, reply

log = logging.getLogger(__name__)

# The dispatcher heartbeats every client with a queued or running request; this much
# silence means it is gone.
LIVENESS_S: Final = HEARTBEAT_LIVENESS * HEARTBEAT_INTERVAL_S
# linger=0 would discard a Cancel still queued in the socket; give it a moment to leave.
CANCEL_LINGER_MS: Final = 200


class ClientGone(Exception):
    """The HTTP client hung up while its request was waiting; nobody to answer."""


class Dispatcher:
    """Open calls to the dispatcher at ``address``; one per gateway process."""

    def __init__(
        self, address: str, *, liveness_s: float = LIVENESS_S, context: zmq.Context[zmq.Socket[bytes]] | None = None,
        keys: endpoints.LinkKeys = endpoints.PLAIN, cache_address: str | None = None,
    ) -> None:
        self.address = address
        self.liveness_s = liveness_s
        self.keys = keys  # CURVE for a tcp:// address
        # The process's ZeroMQ context, and its round trips (to the cachekeeper too: gateway.upstream.answers).
        self.upstream = Upstream(context, keys)
        # /ready reports on the cachekeeper too; None: the cache is disabled.
        self.cache = CacheProbe(cache_address, self.upstream)

    def open(
        self, request: protocol.Generate, abandoned: Callable[[], bool] | None = None,
        then: protocol.Generate | None = None,
    ) -> Call:
        """Send ``request`` on a new socket and return the call that reads its answer.

        ``abandoned`` tells whether the HTTP client has hung up (see the module doc).
        ``then`` (a background warm, gateway.api.plan) follows on the same socket, so the
        dispatcher sees it after the request; nobody reads its answer, and closing the
        call does not cancel it.
        """
        socket = self.upstream.dealer(self.address)
        try:
            socket.send(protocol.encode(request), zmq.NOBLOCK)
            if then is not None:
                socket.send(protocol.encode(then), zmq.NOBLOCK)
        except zmq.ZMQError as err:
            socket.close(linger=0)
            raise errors.dispatcher_unavailable(f"cannot reach the dispatcher: {err}") from err
        return Call(socket, request, self.liveness_s, abandoned, ignored=None if then is None else then.request_id)

    def status(
        self, timeout_s: float, prefix: Sequence[tuple[bytes, int]] = (), chunks: Sequence[bytes] = ()
    ) -> protocol.Status | None:
        """Ask for the dispatcher's status; None if it does not answer within ``timeout_s``.

        ``prefix`` (a prompt's affinity links) also asks how much of it is read, ``chunks``
        (its pieces in chunk mode) how many of them are (gateway.api.plan).
        """
        query = protocol.StatusQuery(prefix=list(prefix), chunks=list(chunks))
        return self.upstream.ask(self.address, query, reply(protocol.Status), timeout_s)

    def close(self) -> None:
        """Close every socket and the context (at process exit)."""
        self.upstream.close()


class Call:
    """One Generate in flight, on its own socket; close it (or use ``with``) when done.

    Closing a call that has not finished sends a Cancel, so a client that hangs up
    frees its worker.
    """

    def __init__(
        self,
        socket: zmq.Socket[bytes],
        request: protocol.Generate,
        liveness_s: float,
        abandoned: Callable[[], bool] | None = None,
        ignored: str | None = None,
    ) -> None:
        self.request = request
        self._ignored = ignored  # the request id of a warm sent on this socket too: its answer is nobody's
        self.finished = False
        # Prompt tokens that compression saved before sending: reported as
        # usage.reame.uncompressed_prompt_tokens - prompt_tokens.
        self.saved_tokens = 0
        self.compression = ""  # the compression mode of the prompt sent: usage.reame.compression
        # Sees each Delta and Done before it is returned, and may replace it (gateway.upstream.answers records them).
        self.observer: Callable[[protocol.Delta | protocol.Done], protocol.Delta | protocol.Done] | None = None
        self._socket = socket
        self._liveness_s = liveness_s
        self._abandoned = abandoned
        self._probed = time.monotonic()
        self._closed = False

    def next(self) -> protocol.Delta | protocol.Done:
        """Wait for the next Delta, or the final Done.

        Raise APIError on an Error message or a silent dispatcher, ClientGone when the
        HTTP client has hung up.
        """
        if self.finished:
            raise RuntimeError("next() on a finished call")
        request_id = self.request.request_id
        while True:
            if time.time() > self.request.deadline + self._liveness_s:
                # The dispatcher enforces the deadline; this only bounds a dispatcher that
                # stays alive but never answers.
                self.finished = True
                raise APIError(504, "the request timed out", type=errors.TIMEOUT, code="timeout")
            if not self._socket.poll(int(self._liveness_s * 1000)):
                raise errors.dispatcher_unavailable(
                    f"the dispatcher stopped answering (silent for {self._liveness_s:g} s)"
                )
            self._check_client()
            message = _receive(self._socket)
            if isinstance(message, (protocol.Delta, protocol.Done, protocol.Error)):
                if message.request_id == self._ignored:
                    pass
                elif message.request_id != request_id:
                    log.warning("dropped %s for request %s on the socket of %s",
                                type(message).__name__, message.request_id, request_id)
                elif isinstance(message, protocol.Error):
                    self.finished = True
                    raise errors.from_protocol(message)
                else:
                    self.finished = isinstance(message, protocol.Done)
                    return message if self.observer is None else self.observer(message)
            elif message is None or isinstance(message, protocol.Heartbeat):
                pass  # either way the dispatcher is alive; poll again
            else:
                log.warning("dropped unexpected %s from the dispatcher", type(message).__name__)

    def _check_client(self) -> None:
        now = time.monotonic()
        if self._abandoned is None or now - self._probed < HEARTBEAT_INTERVAL_S:
            return
        self._probed = now
        if self._abandoned():
            raise ClientGone(self.request.request_id)

    def close(self) -> None:
        """Cancel the request if it is still running, then close the socket."""
        if self._closed:
            return
        self._closed = True
        linger = 0
        if not self.finished:
            try:
                self._socket.send(protocol.encode(protocol.Cancel(self.request.request_id)), zmq.NOBLOCK)
                linger = CANCEL_LINGER_MS
            except zmq.ZMQError as err:
                log.warning("could not cancel %s: %s", self.request.request_id, err)
        self._socket.close(linger=linger)

    def __enter__(self) -> Call:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _receive(socket: zmq.Socket[bytes]) -> protocol.Message | None:
    """Read one payload; None (logged) if it is not a valid message."""
    frames = socket.recv_multipart(zmq.NOBLOCK)
    if len(frames) != 1:
        log.warning("dropped a message of %d frames from the dispatcher", len(frames))
        return None
    try:
        return protocol.decode(frames[-1])
    except protocol.ProtocolError as err:
        log.warning("dropped a bad message from the dispatcher: %s", err)
        return None
