"""The DEALER side of reame's links, and its round trips: send, wait until a deadline, match the reply.

:func:`dealer` is the one way a process connects a DEALER to a peer's ROUTER (the
dispatcher's frontend or backend, the cachekeeper): linger 0, so closing never
blocks; a CURVE client on a ``tcp://`` address when the process has link keys
(shared.endpoints). Each new socket gets a new identity from libzmq, so the peer's
ROUTER sees a new client: replies to an earlier socket never reach it.

:class:`Upstream` owns a process's ZeroMQ context and link keys (contexts are
thread-safe, sockets are not) and asks the questions that have one answer:
:meth:`Upstream.ask` opens a socket of its own, sends one message, and returns the
first reply that ``match`` accepts, None when none comes within the timeout; it
never raises and never waits longer. Replies ``match`` rejects (a stale or an
unexpected message, one for another request id) are dropped.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TypeVar

import zmq

from reame.shared import endpoints, protocol

log = logging.getLogger(__name__)

T = TypeVar("T")
M = TypeVar("M")


def dealer(
    context: zmq.Context[zmq.Socket[bytes]], address: str, keys: endpoints.LinkKeys = endpoints.PLAIN
) -> zmq.Socket[bytes]:
    """Return a DEALER connected to ``address``; ZMQError (the socket closed) if it cannot connect."""
    sock = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        endpoints.secure_client(sock, address, keys)  # CURVE on tcp:// when keys are set
        sock.connect(address)
    except zmq.ZMQError:
        sock.close(linger=0)
        raise
    return sock


def reply(kind: type[M], request_id: str | None = None) -> Callable[[protocol.Message], M | None]:
    """Match a ``kind`` message, answering ``request_id`` when one is given (Status carries none)."""

    def match(message: protocol.Message) -> M | None:
        if isinstance(message, kind) and (request_id is None or getattr(message, "request_id", None) == request_id):
            return message
        return None

    return match


def absent(address: str) -> bool:
    """True for an ``ipc://`` address without its socket file: nothing listens there, no need to wait."""
    socket_file = endpoints.ipc_path(address)
    return socket_file is not None and not socket_file.exists()


class Upstream:
    """A process's ZeroMQ context and link keys, and its round trips to its peers; close it at exit.

    Without a ``context`` it makes one; either way :meth:`close` destroys it.
    """

    def __init__(
        self, context: zmq.Context[zmq.Socket[bytes]] | None = None, keys: endpoints.LinkKeys = endpoints.PLAIN
    ) -> None:
        self.context: zmq.Context[zmq.Socket[bytes]] = context if context is not None else zmq.Context()
        self.keys = keys

    def dealer(self, address: str) -> zmq.Socket[bytes]:
        """A new DEALER to ``address`` with this process's keys (see :func:`dealer`)."""
        return dealer(self.context, address, self.keys)

    def ask(
        self, address: str, message: protocol.Message, match: Callable[[protocol.Message], T | None],
        timeout: float, *, skip_absent: bool = False,
    ) -> T | None:
        """Send ``message`` to ``address``; return what ``match`` makes of the first reply it accepts.

        None if no reply is accepted within ``timeout`` seconds, or the link fails (logged);
        with ``skip_absent``, None at once for an ``ipc://`` address nothing listens at.
        """
        if skip_absent and absent(address):
            return None
        what = type(message).__name__
        try:
            sock = self.dealer(address)
        except zmq.ZMQError as err:
            log.warning("cannot send %s to %s: %s", what, address, err)
            return None
        try:
            sock.send(protocol.encode(message), zmq.NOBLOCK)
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0 and sock.poll(max(1, math.ceil(left * 1000))):
                answer = _receive(sock, address)
                if answer is None:
                    continue
                found = match(answer)
                if found is not None:
                    return found
                log.debug("dropped %s from %s: not the answer to %s", type(answer).__name__, address, what)
            log.debug("no answer to %s from %s within %.2f s", what, address, timeout)
            return None
        except zmq.ZMQError as err:
            log.warning("%s to %s failed: %s", what, address, err)
            return None
        finally:
            sock.close(linger=0)

    def tell(self, address: str, message: protocol.Message, *, linger_ms: int, skip_absent: bool = False) -> None:
        """Send ``message`` to ``address`` and expect no answer; the socket lingers ``linger_ms`` for it to leave."""
        if skip_absent and absent(address):
            return
        what = type(message).__name__
        try:
            sock = self.dealer(address)
        except zmq.ZMQError as err:
            log.debug("cannot send %s to %s: %s", what, address, err)
            return
        try:
            sock.send(protocol.encode(message), zmq.NOBLOCK)
        except zmq.ZMQError as err:
            log.debug("could not send %s to %s: %s", what, address, err)
        finally:
            sock.close(linger=linger_ms)

    def close(self) -> None:
        """Close every socket and the context (at process exit)."""
        self.context.destroy(linger=0)


def _receive(sock: zmq.Socket[bytes], address: str) -> protocol.Message | None:
    """Read one payload; None (logged) if it is not one valid message."""
    frames = sock.recv_multipart(zmq.NOBLOCK)
    if len(frames) != 1:
        log.warning("dropped a message of %d frames from %s", len(frames), address)
        return None
    try:
        return protocol.decode(frames[0])
    except protocol.ProtocolError as err:
        log.warning("dropped a bad message from %s: %s", address, err)
        return None
