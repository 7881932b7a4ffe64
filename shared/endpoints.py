"""Prepare and clean up the files behind ``ipc://`` addresses.

libzmq silently unlinks an existing socket file when it binds, so a second
dispatcher (or cachekeeper) on the same address would steal it from a live one.
Before binding we therefore check whether something still listens there: only a
stale file (left by a process that was killed) is removed.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path
from typing import Final

import zmq

IPC_PREFIX: Final = "ipc://"


class EndpointError(OSError):
    """An address that cannot be bound."""


class BindError(Exception):
    """A process cannot listen on one of its addresses; its message says which and why."""


def bind(sock: zmq.Socket[bytes], address: str, what: str) -> None:
    """Make ``address`` bindable and bind ``sock`` to it; raise :class:`BindError` naming ``what``."""
    try:
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
