"""Talk to the shared tier's server (Redis, Valkey) in the layout of cachekeeper.tier_rules.

redis-py does the protocol, TLS (``rediss://``), unix sockets and AUTH with an ACL
user. Its own retries are turned off: a tier that does not answer must cost one
timeout, and cachekeeper.tier decides when to try again. Every failure leaves this
module as RemoteError, the one exception its callers handle.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any, Final, Protocol

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from reame.cachekeeper import tier_rules as rules

# Index keys read per MGET; a 64k-token lookup at 64 tokens a block is 1,024 of them.
MGET_KEYS: Final = 1024
# Two threads use the tier (fetches and pushes) and a retry may overlap one of them.
MAX_CONNECTIONS: Final = 4


class RemoteError(Exception):
    """The tier did not answer in time, refused the connection or the credentials, or failed a command."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Where the tier is and how to reach it (from the cache.shared_* keys)."""

    url: str  # redis://, rediss:// or unix://, without credentials (shared.config refuses them)
    prefix: str
    timeout: float  # seconds, for connecting and for each reply
    user: str = ""
    password: str = dataclasses.field(default="", repr=False)  # read from cache.shared_password_file
    ca_file: str = ""  # rediss:// only: the CA bundle to check the server's certificate against


class Remote(Protocol):
    """What cachekeeper.tier needs of the tier: a fake of it tests the tier without a server."""

    def ping(self) -> None: ...

    def index(self, fingerprint: bytes, blocks: Sequence[bytes], start: int) -> list[bytes | None]: ...

    def entry(self, key: str) -> bytes | None: ...

    def push(self, key: str, fingerprint: bytes, blocks: Sequence[bytes], data: bytes) -> bool: ...

    def drop(self, key: str) -> None: ...

    def close(self) -> None: ...


@contextlib.contextmanager
def _translated(what: str) -> Iterator[None]:
    try:
        yield
    except (redis.RedisError, OSError) as err:
        raise RemoteError(f"{what}: {err or type(err).__name__}") from err


def client_options(settings: Settings) -> dict[str, Any]:
    """Return redis-py's options for ``settings``: timeouts, no retries of its own, credentials, TLS."""
    options: dict[str, Any] = {
        "socket_timeout": settings.timeout,
        "socket_connect_timeout": settings.timeout,
        "retry": Retry(NoBackoff(), 0),
        "max_connections": MAX_CONNECTIONS,
    }
    if settings.user:
        options["username"] = settings.user
    if settings.password:
        options["password"] = settings.password
    if settings.url.startswith("rediss://") and settings.ca_file:
        options["ssl_ca_certs"] = settings.ca_file
    return options


class RedisRemote:
    """The tier on a Redis-protocol server; thread-safe (redis-py's connection pool)."""

    def __init__(self, settings: Settings) -> None:
        self._prefix = settings.prefix
        with _translated("bad shared tier address"):
            self._client = redis.Redis.from_url(settings.url, **client_options(settings))

    def ping(self) -> None:
        with _translated("PING"):
            self._client.ping()

    def index(self, fingerprint: bytes, blocks: Sequence[bytes], start: int) -> list[bytes | None]:
        """Return the index values of depths start + 1 to len(blocks), in one round trip."""
        names = rules.block_names(self._prefix, fingerprint, blocks, start)
        if not names:
            return []
        with _translated("MGET of the index"):
            pipe = self._client.pipeline(transaction=False)
            for first in range(0, len(names), MGET_KEYS):
                pipe.mget(names[first : first + MGET_KEYS])
            found: list[bytes | None] = []
            for values in pipe.execute():
                found.extend(values)
            return found

    def entry(self, key: str) -> bytes | None:
        with _translated(f"GET of entry {key}"):
            value = self._client.get(rules.entry_name(self._prefix, key))
        return value if isinstance(value, bytes) else None

    def push(self, key: str, fingerprint: bytes, blocks: Sequence[bytes], data: bytes) -> bool:
        """Store an entry and point its blocks' index keys at it; return whether its bytes were sent.

        An entry another host pushed already is not sent again, but its index keys are
        set anew (they may have been evicted without it). The entry goes first, so an
        index key never names an entry that is not there yet.
        """
        name = rules.entry_name(self._prefix, key)
        index = dict.fromkeys(rules.block_names(self._prefix, fingerprint, blocks), key)
        with _translated(f"push of entry {key}"):
            present = bool(self._client.exists(name))
            pipe = self._client.pipeline(transaction=False)
            if not present:
                pipe.set(name, data)
            if index:
                pipe.mset(index)
            pipe.execute()
        return not present

    def drop(self, key: str) -> None:
        """Delete an entry whose bytes failed their check (its index keys then dangle: misses)."""
        with _translated(f"DEL of entry {key}"):
            self._client.delete(rules.entry_name(self._prefix, key))

    def close(self) -> None:
        with contextlib.suppress(redis.RedisError, OSError):
            self._client.close()
