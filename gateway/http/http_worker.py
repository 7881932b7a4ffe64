"""gunicorn's gthread worker, hardened for a public address.

What gunicorn's own ThreadWorker leaves open, and what this subclass adds:

- A client that sends a few bytes of a request and stalls holds a thread for ever
  (slowloris: 32 such connections froze the gateway). Here every read of headers
  and body, and every write of an answer, waits at most ``server.read_timeout``
  for the client: the client socket gets that timeout wherever gunicorn makes it
  blocking (:class:`_TimedSocket`). And a request's headers and body together must
  arrive within ``server.read_deadline`` of the thread taking it up: a client that
  sends a byte every few seconds (or a Content-Length it never fills) is not kept.
- One client address may hold at most ``server.max_connections_per_client`` of the
  threads (0: half of them); a connection beyond that is answered 429 at once (by
  the main loop, without waiting for the client) and closed once the client has read it.
  And the last quarter of the threads is kept for addresses with no connection in
  service (:func:`admits`): slow clients from a few addresses cannot fill the pool.
- A liveness probe (``GET /health``, ``GET /ready``) is never refused for its address's
  share: it has its own small share (PROBES_PER_CLIENT) and a short deadline
  (PROBE_DEADLINE_S), so a probe from an address that misbehaves is still answered.
  The share counts probes whose request is still being read (the part a slow client
  stretches), so a monitor asking again as soon as it has its answer never finds
  its own earlier probes still counted.
- Errors raised before the app (414, 431, a bad request line, Content-Length with
  Transfer-Encoding...) are answered in OpenAI's JSON shape with a 4xx, not as
  gunicorn's HTML, and their log line has the client's text escaped.
- A connection that ends without keep-alive is closed in its own thread: gunicorn's
  graceful close waits up to 2 s for the client in the main loop.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import secrets
import selectors
import socket
import threading
import time
import weakref
from collections import Counter
from functools import partial
from typing import Any, Final, NoReturn

from gunicorn import util
from gunicorn.http import errors as http_errors
from gunicorn.workers.gthread import _DEFER, DEFAULT_WORKER_DATA_TIMEOUT, TConn, ThreadWorker

from reame.gateway.http.errors import OVERLOADED, APIError, internal
from reame.gateway.http.headers import GENERATED_PREFIX, REQUEST_ID_HEADER
from reame.gateway.http.requestlog import log_safe
from reame.shared.config import ServerConfig, defaults

log = logging.getLogger("gateway.http")

# A refused connection is kept open this long at most for the client to read its 429.
REFUSED_LINGER_S: Final = 1.0
# Closing a finished connection: how long to wait for the client to close its side.
CLOSE_LINGER_S: Final = 0.5
TOO_MANY: Final = "too_many_connections"
# Probes in service at once per address, and the time their request may take to arrive.
PROBES_PER_CLIENT: Final = 2
PROBE_DEADLINE_S: Final = 2.0
_PROBES: Final = (b"GET /health", b"GET /ready", b"HEAD /health", b"HEAD /ready")
REFUSAL_LOG_S: Final = 10.0

# gunicorn's errors before the app -> (status, reason, code).
_PARSE_ERRORS: Final[list[tuple[type[Exception], int, str, str]]] = [
    (http_errors.LimitRequestLine, 414, "URI Too Long", "uri_too_long"),
    (http_errors.LimitRequestHeaders, 431, "Request Header Fields Too Large", "headers_too_large"),
    (http_errors.ExpectationFailed, 417, "Expectation Failed", "expectation_failed"),
    (http_errors.ForbiddenProxyRequest, 403, "Forbidden", "forbidden"),
    (http_errors.ParseException, 400, "Bad Request", "bad_request"),
]


class ReadTimeout(http_errors.NoMoreData):  # type: ignore[misc]
    """The client sent nothing for read_timeout seconds (an OSError, as gunicorn's NoMoreData is).

    gunicorn drops a connection on NoMoreData quietly, where a plain timeout would
    log a traceback for every stalled client.
    """


# Sockets whose client stalled: gunicorn must not wait for the rest of their body too.
_STALLED: Final[weakref.WeakSet[socket.socket]] = weakref.WeakSet()
# Socket -> the monotonic time by which its current request must have arrived (its
# thread sets it: the class swap of _TimedSocket allows no new attributes).
_DEADLINES: Final[weakref.WeakKeyDictionary[socket.socket, float]] = weakref.WeakKeyDictionary()


class _TimedSocket(socket.socket):
    """A client socket whose blocking mode is a timeout: gunicorn never waits for a client for ever.

    gunicorn switches the socket between non-blocking (in its poller) and blocking
    (in a thread) with ``setblocking``; blocking here means "up to read_timeout".
    The class of gunicorn's own socket object is swapped (same layout, no new slots).
    """

    __slots__ = ()
    read_timeout: float = defaults(ServerConfig).read_timeout  # set once per gunicorn worker process from the config

    def setblocking(self, flag: bool) -> None:
        if flag:
            self.settimeout(self.read_timeout)
        else:
            super().setblocking(False)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if flags & socket.MSG_DONTWAIT:
            # Python waits for readability up to the timeout before any recv, flags or not:
            # a peek for a hang-up (resources.disconnect_probe) must not wait at all.
            timeout = self.gettimeout()
            self.settimeout(0.0)
            try:
                return super().recv(bufsize, flags)
            finally:
                self.settimeout(timeout)
        deadline = _DEADLINES.get(self)
        left = self.read_timeout if deadline is None else min(self.read_timeout, deadline - time.monotonic())
        if left <= 0:
            self._stalled("did not send its whole request before its deadline")
        blocking = self.gettimeout() != 0.0
        if blocking:
            self.settimeout(left)
        try:
            return super().recv(bufsize, flags)
        except TimeoutError:
            late = deadline is not None and left < self.read_timeout
            self._stalled("did not send its whole request before its deadline" if late
                          else f"sent nothing for {self.read_timeout:g} s")
        finally:
            if blocking:
                self.settimeout(self.read_timeout)

    def _stalled(self, why: str) -> NoReturn:
        try:
            peer = self.getpeername()[0]
        except (OSError, IndexError):
            peer = "-"
        log.info("client %s %s: connection closed", peer, why)
        _STALLED.add(self)
        raise ReadTimeout(b"") from None


def error_response(error: APIError, reason: str, retry_after: int) -> bytes:
    """Return a whole HTTP/1.1 answer with ``error``'s OpenAI body, closing the connection.

    ``reason`` is the status line's phrase; ``Retry-After: retry_after`` goes with it
    if ``error.retry``, as the app answers (gateway.app). It carries a fresh
    ``x-request-id``, as every answer of the app does (gateway.http.headers): the request
    was not read, so there is no client id to echo.
    """
    body = json.dumps({"error": error.to_dict()}, ensure_ascii=True).encode("ascii")
    headers = [
        f"HTTP/1.1 {error.status} {reason}", "Connection: close", "Content-Type: application/json",
        f"Content-Length: {len(body)}", f"{REQUEST_ID_HEADER}: {GENERATED_PREFIX}{secrets.token_hex(12)}",
    ]
    if error.retry:
        headers.append(f"Retry-After: {retry_after}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode("ascii") + body


def parse_error(exc: Exception) -> tuple[int, str, str]:
    """Return the status, reason and code for an error gunicorn raised while reading a request."""
    for kind, status, reason, code in _PARSE_ERRORS:
        if isinstance(exc, kind):
            return status, reason, code
    return 400, "Bad Request", "bad_request"


class ReameThreadWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's gthread worker with read timeouts, a per-client share of threads and JSON errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        server = self.app.config.server
        _TimedSocket.read_timeout = server.read_timeout
        self.read_deadline = server.read_deadline
        self.per_client = server.max_connections_per_client or max(1, self.cfg.threads // 2)
        self.retry_after = server.retry_after
        self._active: Counter[str] = Counter()  # client address -> connections in a thread
        self._probes: Counter[str] = Counter()  # client address -> liveness probes in a thread
        self._total = 0  # connections in a thread, probes not counted
        self._lock = threading.Lock()
        self._refused: dict[socket.socket, float] = {}  # socket -> close it by then: main loop only
        self._refusals: dict[str, tuple[float, int]] = {}  # address -> (last logged, refused since): main loop

    # -- one client's share of the threads ------------------------------------------------

    def _admit(self, address: str, probe: bool) -> bool:
        """Count a connection in service for ``address`` if it has room (any thread)."""
        if not address:
            return True
        counts = self._probes if probe else self._active
        with self._lock:
            if probe:
                if counts[address] >= PROBES_PER_CLIENT:
                    return False
            elif not admits(counts[address], self._total, self.per_client, self.cfg.threads):
                return False
            counts[address] += 1
            self._total += not probe
            return True

    def _leave(self, address: str, probe: bool) -> None:
        counts = self._probes if probe else self._active
        with self._lock:
            counts[address] -= 1
            self._total -= not probe
            if counts[address] <= 0:
                del counts[address]

    def _refuse(self, conn: TConn, probe: bool) -> None:
        """Answer 429 in the main loop; keep the socket in the poller until the client has read it."""
        sock = conn.sock
        address = _address(conn)
        if probe:
            message = f"this client already has {PROBES_PER_CLIENT} probes being read; retry when one ends"
        else:
            message = f"this client already has {self.per_client} connections in service; retry when one ends"
        refusal = APIError(429, message, type=OVERLOADED, code=TOO_MANY, retry=True)
        answer = error_response(refusal, "Too Many Requests", self.retry_after)
        self._note_refusal(address)
        try:
            sock.setblocking(False)
            _drain(sock)
            sock.send(answer)  # a few hundred bytes into an empty send buffer
            sock.shutdown(socket.SHUT_WR)
            self.poller.register(sock, selectors.EVENT_READ, partial(self._on_refused_readable, sock))
        except OSError:
            self._close_refused(sock)
            return
        self._refused[sock] = time.monotonic() + REFUSED_LINGER_S

    def _note_refusal(self, address: str) -> None:
        """Log refusals once per address and REFUSAL_LOG_S: a flood of them must not flood the log."""
        now = time.monotonic()
        last = self._refusals.get(address)
        if last is None or now - last[0] >= REFUSAL_LOG_S:
            refused = (last[1] if last else 0) + 1
            log.warning("client %s has %d connections in service: %d refused (429) since the last report",
                        address, self.per_client, refused)
            self._refusals[address] = (now, 0)
        else:
            self._refusals[address] = (last[0], last[1] + 1)
        if len(self._refusals) > 4096:  # forget quiet addresses
            self._refusals = {a: v for a, v in self._refusals.items() if now - v[0] < REFUSAL_LOG_S}

    def _on_refused_readable(self, sock: socket.socket, _fileobj: object) -> None:
        if _drain(sock):
            self._refused.pop(sock, None)
            self._close_refused(sock)

    def _close_refused(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(sock)
        util.close(sock)
        self.nr_conns -= 1

    def murder_pending(self) -> None:
        super().murder_pending()
        now = time.monotonic()
        for sock in [sock for sock, until in self._refused.items() if until <= now]:
            del self._refused[sock]
            self._close_refused(sock)

    def finish_request(self, conn: TConn, fs: Any) -> None:
        refused = getattr(conn, "reame_refused", "")
        if refused:
            conn.reame_refused = ""
            self._refuse(conn, probe=refused == "probe")
            return
        if getattr(conn, "reame_closed", False):  # closed in its thread already
            self.nr_conns -= 1
            return
        super().finish_request(conn, fs)

    # -- a connection in a thread --------------------------------------------------------

    def handle(self, conn: TConn) -> Any:
        address = _address(conn)
        # What the request is must be known before admitting it (a probe has its own
        # share), so wait for its first bytes here as gunicorn's handle would.
        if not conn.initialized and not conn.data_ready:
            if not conn.wait_for_data(DEFAULT_WORKER_DATA_TIMEOUT):
                return _DEFER
            conn.data_ready = True
        probe = _is_probe(conn.sock)
        # Counted while in a thread, not while queued: a client's closed keep-alive
        # connections queue up behind a busy pool, and cost nothing there.
        if not self._admit(address, probe):
            conn.reame_refused = "probe" if probe else "request"  # finish_request answers it in the main loop
            return False
        conn.reame_reading_probe = probe
        try:
            if type(conn.sock) is socket.socket:
                conn.sock.__class__ = _TimedSocket
            deadline = PROBE_DEADLINE_S if probe else self.read_deadline
            _DEADLINES[conn.sock] = time.monotonic() + deadline
            result = super().handle(conn)
            if result is False:
                # gunicorn would close it in the main loop, waiting up to 2 s for the client.
                util.close_graceful(conn.sock, timeout=CLOSE_LINGER_S)
                conn.reame_closed = True
            return result
        finally:
            _DEADLINES.pop(conn.sock, None)
            if address and (conn.reame_reading_probe or not probe):
                self._leave(address, probe)
            conn.reame_reading_probe = False

    def handle_request(self, req: Any, conn: TConn) -> bool:
        if getattr(conn, "reame_reading_probe", False):
            # Read in full: give the probe's slot back before answering, so the answer
            # reaches the client only after the slot is free again.
            conn.reame_reading_probe = False
            address = _address(conn)
            if address:
                self._leave(address, True)
        return bool(super().handle_request(req, conn))

    def _keepalive_after(self, conn: TConn, keepalive: bool) -> bool:
        # gunicorn drains an unread body for up to 5 s more; a stalled client gets no more time.
        if conn.sock in _STALLED:
            return False
        return bool(super()._keepalive_after(conn, keepalive))

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: Exception) -> None:
        """Answer an error raised outside the app in OpenAI's JSON shape (gunicorn writes HTML)."""
        peer = addr[0] if isinstance(addr, tuple) and addr else "-"
        if isinstance(exc, http_errors.ParseException) and not isinstance(
            exc, (http_errors.InvalidResponseHeader, http_errors.InvalidResponseHeaderName)
        ):
            status, reason, code = parse_error(exc)
            message = f"{reason}: {log_safe(str(exc))[:200]}"
            log.warning("invalid request from %s: %s %d %s", peer, code, status, log_safe(str(exc))[:200])
            answer = error_response(APIError(status, message, code=code), reason, self.retry_after)
        else:
            log.error("error while serving a request from %s", peer, exc_info=exc)
            answer = error_response(internal(), "Internal Server Error", self.retry_after)
        try:
            util.write_nonblock(client, answer)
        except OSError:
            log.debug("could not send the error answer to %s", peer)


def admits(in_service: int, total: int, per_client: int, threads: int) -> bool:
    """Tell whether an address with ``in_service`` connections in threads may have one more.

    Each address gets ``per_client``; and once ``total`` connections fill three quarters
    of the ``threads``, only addresses with none in service get one, so a few addresses
    (slow clients from three addresses took all 32 threads) leave threads for the others.
    """
    if in_service >= per_client:
        return False
    return in_service == 0 or total < threads - max(1, threads // 4)


def _is_probe(sock: socket.socket) -> bool:
    """Tell whether the request waiting on ``sock`` is a liveness probe, from its first bytes (not read)."""
    try:
        head = sock.recv(16, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return False
    return any(head.startswith(probe) and head[len(probe):len(probe) + 1] in (b" ", b"?") for probe in _PROBES)


def _address(conn: TConn) -> str:
    """Return the client's IP address ("" for a Unix socket: not limited)."""
    client = conn.client
    return str(client[0]) if isinstance(client, tuple) and client else ""


def _drain(sock: socket.socket, most: int = 1 << 20) -> bool:
    """Read what the client has sent without waiting (``most`` bytes); True once it has closed its side."""
    try:
        while most > 0:
            data = sock.recv(65536, socket.MSG_DONTWAIT)
            if not data:
                return True
            most -= len(data)
        return False
    except (BlockingIOError, InterruptedError):
        return False
    except OSError as err:
        return err.errno != errno.EAGAIN
