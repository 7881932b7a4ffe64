"""`reame keys generate DIR`: CURVE key pairs for the tcp:// links, in zmq's certificate format.

DIR gets a server pair (``server.key`` public, ``server.key_secret`` secret), a client
pair (``NAME.key``, ``NAME.key_secret``) and ``authorized/NAME.key``, the directory of
client keys the servers accept. Secret files are 0600 from the moment they exist:
they are written under a umask that lets nobody else read them. Run it again with
another ``--client NAME`` to add a client (a second worker host, say); the server
pair is kept, and nothing existing is overwritten.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from zmq.auth import create_certificates

SERVER: Final = "server"
DEFAULT_CLIENT: Final = "client"
AUTHORIZED: Final = "authorized"
PUBLIC_SUFFIX: Final = ".key"
SECRET_SUFFIX: Final = ".key_secret"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class KeysError(Exception):
    """The keys cannot be written; the message says why."""


@contextlib.contextmanager
def _private_files() -> Iterator[None]:
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def _pair(directory: Path, name: str) -> tuple[Path, Path]:
    """Write ``name``'s key pair in ``directory``; return its public and secret files."""
    public, secret = directory / f"{name}{PUBLIC_SUFFIX}", directory / f"{name}{SECRET_SUFFIX}"
    with _private_files():
        create_certificates(directory, name)
    public.chmod(0o644)  # public: meant to be copied to the other side
    return public, secret


def generate(directory: Path, client: str = DEFAULT_CLIENT) -> list[Path]:
    """Write the server pair (unless present), ``client``'s pair and its authorized copy; return the new files."""
    if not _NAME.fullmatch(client) or client == SERVER:
        raise KeysError(f"client name {client!r}: use letters, digits, '.', '_' or '-', and not {SERVER!r}")
    authorized = directory / AUTHORIZED
    client_files = [directory / f"{client}{PUBLIC_SUFFIX}", directory / f"{client}{SECRET_SUFFIX}",
                    authorized / f"{client}{PUBLIC_SUFFIX}"]
    existing = [str(path) for path in client_files if path.exists()]
    if existing:
        raise KeysError(f"{', '.join(existing)} already exist: pick another --client name, or remove them")
    server_files = [directory / f"{SERVER}{PUBLIC_SUFFIX}", directory / f"{SERVER}{SECRET_SUFFIX}"]
    server_present = [path.exists() for path in server_files]
    if any(server_present) and not all(server_present):
        raise KeysError(f"half a server pair in {directory}: remove {SERVER}.key* or restore the missing file")
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        authorized.mkdir(mode=0o700, exist_ok=True)
        written = [] if all(server_present) else list(_pair(directory, SERVER))
        public, secret = _pair(directory, client)
        shutil.copyfile(public, authorized / public.name)
    except OSError as err:
        raise KeysError(f"cannot write keys in {directory}: {err}") from err
    return [*written, public, secret, authorized / public.name]


def config_lines(directory: Path, client: str = DEFAULT_CLIENT) -> str:
    """Return the [security] lines that use the keys in ``directory``."""
    d = directory.resolve()
    return (
        "[security]\n"
        "# servers (dispatcher, cachekeeper):\n"
        f"curve_server_key = {d / (SERVER + SECRET_SUFFIX)}\n"
        f"curve_authorized_dir = {d / AUTHORIZED}\n"
        "# clients (gateway, workers, reame cache):\n"
        f"curve_client_key = {d / (client + SECRET_SUFFIX)}\n"
        f"curve_server_public = {d / (SERVER + PUBLIC_SUFFIX)}\n"
    )


def run(directory: str, client: str) -> int:
    """Carry out `reame keys generate`; print what was written and the config lines."""
    path = Path(directory).expanduser()
    try:
        written = generate(path, client)
    except KeysError as err:
        print(f"reame: {err}", file=sys.stderr)
        return 1
    for file in written:
        print(f"wrote {file}", file=sys.stderr)
    print(config_lines(path, client), end="")
    return 0
