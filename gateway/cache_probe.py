"""Whether the cachekeeper answers, for /ready: the cache is optional, so the server serves either way.

The gateway asks the cachekeeper itself, with one CacheAdmin STATS and a short
timeout, on a socket of its own per question (sockets are not thread-safe). It
reports what is true now: "on" (the cachekeeper answered), "off" (it is enabled but
does not answer: the workers serve without it and `reame serve` keeps restarting it)
or "disabled" (cache.enabled = false).
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Final

import zmq

from reame.shared import endpoints, protocol

log = logging.getLogger(__name__)

ON: Final = "on"
OFF: Final = "off"
DISABLED: Final = "disabled"


class CacheProbe:
    """Ask the cachekeeper at ``address`` (None: the cache is disabled) whether it answers."""

    def __init__(
        self, address: str | None, context: zmq.Context[zmq.Socket[bytes]],
        keys: endpoints.LinkKeys = endpoints.PLAIN,
    ) -> None:
        self.address = address
        self._context = context
        self._keys = keys

    def state(self, timeout_s: float) -> str:
        """Return ON, OFF or DISABLED, waiting at most ``timeout_s`` for an answer."""
        if self.address is None:
            return DISABLED
        return OFF if self.report(timeout_s) is None else ON

    def report(self, timeout_s: float) -> protocol.CacheReport | None:
        """Return the cachekeeper's counters (for /metrics), None if it does not answer within ``timeout_s``."""
        if self.address is None:
            return None
        socket_file = endpoints.ipc_path(self.address)
        if socket_file is not None and not socket_file.exists():
            return None  # nothing listens: no need to wait
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            endpoints.secure_client(sock, self.address, self._keys)
            sock.connect(self.address)
            request_id = f"ready-{secrets.token_hex(4)}"
            sock.send(protocol.encode(protocol.CacheAdmin(request_id, protocol.CacheCommand.STATS)), zmq.NOBLOCK)
            end = time.monotonic() + timeout_s
            while (left := end - time.monotonic()) > 0 and sock.poll(max(1, int(left * 1000))):
                try:
                    message = protocol.decode(sock.recv(zmq.NOBLOCK))
                except protocol.ProtocolError:
                    continue
                if isinstance(message, protocol.CacheReport) and message.request_id == request_id:
                    return message
            return None
        except zmq.ZMQError as err:
            log.debug("the cache probe to %s failed: %s", self.address, err)
            return None
        finally:
            sock.close(linger=0)
