"""Bind and connect reame's ZeroMQ sockets: ``ipc://`` files, CURVE on ``tcp://``.

libzmq silently unlinks an existing socket file when it binds, so a second
dispatcher (or cachekeeper) on the same address would steal it from a live one.
Before binding we therefore check whether something still listens there: only a
stale file (left by a process that was killed) is removed. The directory of the
socket files is the service user's alone (0700), which is what protects ``ipc://``.

``tcp://`` links are protected by CURVE when ``[security]`` names the keys: a
process reads them once with :func:`link_keys` (which also refuses a plain ``tcp://``
address that is not loopback), servers bind through :func:`bind` with a
:class:`Guard` (which runs the ZAP authenticator that accepts only the listed
client keys), and every connecting socket goes through :func:`secure_client`.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import logging
import os
import socket
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final

import zmq
from zmq.auth import load_certificate, load_certificates
from zmq.auth.thread import ThreadAuthenticator

from reame.shared.config import SecurityConfig

log = logging.getLogger(__name__)

IPC_PREFIX: Final = "ipc://"
TCP_PREFIX: Final = "tcp://"
# A client refused by the ZAP handler reconnects every 100 ms: one warning per key per minute.
REFUSAL_LOG_INTERVAL_S: Final = 60.0


class EndpointError(OSError):
    """An address that cannot be bound."""


class BindError(Exception):
    """A process cannot listen on one of its addresses; its message says which and why."""


def bind(sock: zmq.Socket[bytes], address: str, what: str, guard: Guard | None = None) -> None:
    """Make ``address`` bindable and bind ``sock`` to it; raise :class:`BindError` naming ``what``.

    With a ``guard``, a ``tcp://`` socket is a CURVE server that accepts only the listed clients.
    """
    try:
        if guard is not None:
            guard.secure(sock, address)
        prepare(address)
        sock.bind(address)
    except (EndpointError, zmq.ZMQError) as err:
        raise BindError(f"cannot bind {what} to {address}: {err}") from err


def ipc_path(address: str) -> Path | None:
    """Return the socket file of an ``ipc://`` address, None for other transports."""
    if not address.startswith(IPC_PREFIX):
        return None
    return Path(address[len(IPC_PREFIX):])


def prepare(address: str) -> None:
    """Make ``address`` bindable: create its directory (0700), remove a stale socket file."""
    path = ipc_path(address)
    if path is None:
        return
    directory = path.parent
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        owner = directory.stat().st_uid
    except OSError as err:
        raise EndpointError(f"cannot create directory {directory} for {address}: {err.strerror}") from err
    if owner != os.getuid():
        # Another user could then read and write our sockets.
        raise EndpointError(f"directory {directory} for {address} belongs to another user (uid {owner})")
    _make_private(directory)
    if not _exists(path):
        return
    if _listening(path):
        raise EndpointError(f"{address} is in use: another process listens there (its socket is {path})")
    try:
        path.unlink()
    except OSError as err:
        raise EndpointError(f"cannot remove stale socket file {path}: {err.strerror}") from err


def cleanup(address: str) -> None:
    """Remove the socket file of an ``ipc://`` address we bound, if it is still there."""
    path = ipc_path(address)
    if path is not None:
        path.unlink(missing_ok=True)


def _exists(path: Path) -> bool:
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return False
    except OSError as err:
        raise EndpointError(f"cannot inspect {path}: {err.strerror}") from err
    if not stat.S_ISSOCK(mode):
        raise EndpointError(f"{path} exists and is not a socket; refusing to replace it")
    return True


def _listening(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError as err:
        if err.errno in (errno.ECONNREFUSED, errno.ENOENT):
            return False
        raise EndpointError(f"cannot probe {path}: {err.strerror}") from err
    finally:
        probe.close()
    return True


def _make_private(directory: Path) -> None:
    """Take group and other access away from our socket directory (e.g. a 0755 RuntimeDirectory)."""
    try:
        mode = stat.S_IMODE(directory.stat().st_mode)
        if mode & 0o077:
            directory.chmod(0o700)
            log.warning("made %s private (mode %o -> 700): it holds reame's sockets", directory, mode)
    except OSError as err:
        raise EndpointError(f"cannot make {directory} private to this user: {err.strerror}") from err


# -- CURVE on tcp:// ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LinkKeys:
    """The CURVE keys (z85) a process uses on its tcp:// links, read once at start-up.

    A server (dispatcher, cachekeeper) has ``server_secret`` and ``authorized``; a client
    (gateway, worker, `reame cache`) has its own pair and ``server_public``. Unset: plain.
    """

    server_public: bytes | None = None
    server_secret: bytes | None = None
    authorized: Path | None = None
    client_public: bytes | None = None
    client_secret: bytes | None = None


PLAIN: Final = LinkKeys()


def is_tcp(address: str) -> bool:
    return address.startswith(TCP_PREFIX)


def is_loopback(address: str) -> bool:
    """Tell whether a ``tcp://HOST:PORT`` address is on this machine only (127.0.0.0/8, ::1, localhost)."""
    if not is_tcp(address):
        return False
    # ZeroMQ's "tcp://SOURCE;HOST:PORT" connects from SOURCE: the peer is HOST.
    host = address[len(TCP_PREFIX):].rpartition(";")[2].rpartition(":")[0].strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "*", an interface name or a host name: may be any address


def plain_refusal(address: str, *, server: bool, keyed: bool, allowed: bool) -> str | None:
    """Say why ``address`` may not carry plain traffic, or None if it may.

    A tcp:// address that is not loopback needs CURVE keys (``keyed``) unless plain
    tcp was ``allowed`` explicitly; ipc:// and loopback never do.
    """
    if not is_tcp(address) or keyed or allowed or is_loopback(address):
        return None
    names = "curve_server_key and curve_authorized_dir" if server else "curve_client_key and curve_server_public"
    risk = ("anyone who reaches it could attach as a worker and read prompts, or use the cache"
            if server else "prompts and cache entries would cross the network in the clear")
    return (
        f"{address} is a plain tcp:// address that is not loopback: {risk}; set security.{names} "
        "(`reame keys generate DIR` writes the keys), or security.allow_plain_tcp = true to allow it"
    )


def link_keys(security: SecurityConfig, *, binds: Iterable[str] = (), connects: Iterable[str] = ()) -> LinkKeys:
    """Read the keys this process needs for the addresses it binds and connects to.

    Raise :class:`EndpointError` if a key file is missing or unreadable, or if an
    address would be plain tcp:// off this machine without security.allow_plain_tcp.
    """
    binds, connects = [a for a in binds if is_tcp(a)], [a for a in connects if is_tcp(a)]
    server_side, client_side = bool(security.curve_server_key), bool(security.curve_client_key)
    for address in binds:
        refusal = plain_refusal(address, server=True, keyed=server_side, allowed=security.allow_plain_tcp)
        if refusal:
            raise EndpointError(f"refusing to listen: {refusal}")
    for address in connects:
        refusal = plain_refusal(address, server=False, keyed=client_side, allowed=security.allow_plain_tcp)
        if refusal:
            raise EndpointError(f"refusing to connect: {refusal}")
    keys = PLAIN
    if binds and server_side:
        public, secret = _secret_certificate(security.curve_server_key, "curve_server_key")
        authorized = _authorized_dir(security.curve_authorized_dir)
        keys = dataclasses.replace(keys, server_public=public, server_secret=secret, authorized=authorized)
    if connects and client_side:
        public, secret = _secret_certificate(security.curve_client_key, "curve_client_key")
        server_public = _public_certificate(security.curve_server_public, "curve_server_public")
        keys = dataclasses.replace(keys, server_public=server_public, client_public=public, client_secret=secret)
    return keys


def _public_certificate(path: str, name: str) -> bytes:
    try:
        public, _ = load_certificate(Path(path).expanduser())
    except (OSError, ValueError) as err:
        raise EndpointError(f"security.{name} = {path}: cannot read a CURVE certificate there: {err}") from err
    return public


def _secret_certificate(path: str, name: str) -> tuple[bytes, bytes]:
    file = Path(path).expanduser()
    try:
        public, secret = load_certificate(file)
        mode = stat.S_IMODE(file.stat().st_mode)
    except (OSError, ValueError) as err:
        raise EndpointError(f"security.{name} = {path}: cannot read a CURVE certificate there: {err}") from err
    if secret is None:
        raise EndpointError(f"security.{name} = {path} holds no secret key: name the .key_secret file")
    if mode & 0o077:
        log.warning("the secret key %s can be read by other users (mode %o): chmod 600 it", file, mode)
    return public, secret


def _authorized_dir(path: str) -> Path:
    directory = Path(path).expanduser()
    try:
        listed = load_certificates(directory)
    except (OSError, ValueError) as err:
        raise EndpointError(f"security.curve_authorized_dir = {path}: {err}") from err
    if not listed:
        log.warning("no client key (*.key) in %s: every CURVE client will be refused", directory)
    return directory


def secure_client(sock: zmq.Socket[bytes], address: str, keys: LinkKeys) -> None:
    """Make ``sock`` a CURVE client if it is about to connect to a tcp:// ``address`` and keys are set."""
    if not is_tcp(address) or keys.client_secret is None or keys.client_public is None:
        return
    assert keys.server_public is not None  # link_keys reads it with the client pair
    sock.curve_serverkey = keys.server_public
    sock.curve_publickey = keys.client_public
    sock.curve_secretkey = keys.client_secret


class Guard:
    """CURVE for the tcp:// sockets a process binds, with one ZAP authenticator per ZeroMQ context.

    Without a ZAP handler libzmq would accept any CURVE client, so the authenticator
    starts before the first secured socket binds. Close the guard before terminating
    the context: the authenticator's sockets live in it.
    """

    def __init__(self, keys: LinkKeys, clock: Callable[[], float] = time.monotonic) -> None:
        self._keys = keys
        self._clock = clock
        self._authenticators: list[ThreadAuthenticator] = []

    def secure(self, sock: zmq.Socket[bytes], address: str) -> None:
        """Make ``sock`` a CURVE server if ``address`` is tcp:// and a server key is set."""
        keys = self._keys
        if not is_tcp(address) or keys.server_secret is None:
            return
        assert keys.authorized is not None  # link_keys reads it with the server key
        context = sock.context
        if not any(a.context is context for a in self._authenticators):
            authenticator = ThreadAuthenticator(context, log=RefusalLog(log, keys.authorized, self._clock))
            authenticator.start()
            authenticator.configure_curve(domain="*", location=str(keys.authorized))
            self._authenticators.append(authenticator)
            log.info("CURVE on tcp://: accepting only the client keys (*.key) in %s", keys.authorized)
        sock.curve_secretkey = keys.server_secret
        if keys.server_public is not None:
            sock.curve_publickey = keys.server_public
        sock.curve_server = True

    def close(self) -> None:
        for authenticator in self._authenticators:
            authenticator.stop()
        self._authenticators.clear()


class RefusalLog(logging.LoggerAdapter[logging.Logger]):
    """pyzmq's ZAP handler logs a refused key at debug: make that a warning, once a minute per key.

    The handler logs each request's peer address just before its verdict (same thread),
    so the warning can say who knocked.
    """

    def __init__(self, logger: logging.Logger, directory: Path, clock: Callable[[], float]) -> None:
        super().__init__(logger, {})
        self._directory = directory
        self._clock = clock
        self._peer = "an unknown address"
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        if str(msg).startswith("version:") and len(args) >= 4:
            self._peer = str(args[3]) or "an unknown address"
        try:
            verdict = str(msg) % args if args else str(msg)
        except (TypeError, ValueError):
            verdict = str(msg)
        if not verdict.startswith("DENIED"):
            super().debug(msg, *args, **kwargs)
            return
        now, last = self._clock(), self._last.get(verdict)
        if last is not None and now - last < REFUSAL_LOG_INTERVAL_S:
            self._since[verdict] = self._since.get(verdict, 0) + 1
            return
        self._last[verdict] = now
        again = self._since.pop(verdict, 0)
        self.warning(
            "refused a connection from %s: %s: its key is not among the client keys (*.key) in %s%s",
            self._peer, verdict, self._directory, f" ({again} more refusals since the last warning)" if again else "",
        )
