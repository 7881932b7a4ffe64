"""API keys: read them from the configuration, match the one a request presents, name it safely.

Pure: no Falcon, no sockets (the middleware is gateway.http.guard). A request presents a
key as ``Authorization: Bearer KEY`` (what the openai client sends) or
``X-Api-Key: KEY``. Matching hashes the presented key and compares the digest with
every configured key's digest with ``hmac.compare_digest``, never stopping early, so
the time taken says nothing about which key, or how much of one, was right.

A key is never logged or sent on: the request log names it by :func:`key_id`, and
the cache scope the workers see (:func:`cache_scope`) is a hash under another
personalisation, so the two cannot be told to belong together.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from typing import Final

from reame.shared.apikeys import api_key_problem
from reame.shared.config import Config, ConfigError, ServerConfig

BEARER: Final = "bearer"  # the auth scheme, compared case-insensitively (RFC 9110)
KEY_ID_CHARS: Final = 8
MAX_CACHE_SALT: Final = 256  # characters of a request's reame.cache_salt
SHORT_KEY: Final = 16  # characters; shorter keys are accepted with a warning at start-up
_DIGEST_PERSON: Final = b"reame-apikey"
_SCOPE_PERSON: Final = b"reame-scope"


@dataclasses.dataclass(frozen=True, slots=True)
class Tenant:
    """Who sent a request, as far as the gateway tells anyone: never the key itself."""

    key_id: str  # for the log line: the first hex digits of the key's SHA-256
    scope: str  # for the KV cache: a hash of the key under another personalisation

    def __repr__(self) -> str:
        return f"Tenant({self.key_id})"


class Keys:
    """The configured API keys, held as digests; empty means no key is asked for."""

    def __init__(self, keys: list[str] | tuple[str, ...]) -> None:
        # Duplicates would only cost comparisons.
        self._tenants = {_digest(k): Tenant(key_id(k), _scope_of(k)) for k in keys}
        self.short = sum(1 for k in set(keys) if len(k) < SHORT_KEY)

    def __len__(self) -> int:
        return len(self._tenants)

    def __repr__(self) -> str:
        return f"Keys({len(self)} keys)"

    def match(self, presented: str) -> Tenant | None:
        """Return the tenant whose key is ``presented``, or None; constant time in which key matched."""
        digest = _digest(presented)
        found: Tenant | None = None
        for known, tenant in self._tenants.items():
            if hmac.compare_digest(known, digest):
                found = tenant  # and keep going: the loop always runs over every key
        return found


def key_id(key: str) -> str:
    """Name ``key`` in logs: the first hex digits of its SHA-256 (what `sha256sum` prints)."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_ID_CHARS]


def presented_key(authorization: str | None, x_api_key: str | None) -> str | None:
    """Return the key a request presents, from either header, or None if it presents none.

    A malformed Authorization header (another scheme, no token) presents no key
    unless X-Api-Key does; the key is then whatever X-Api-Key holds.
    """
    if authorization:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() == BEARER and token.strip():
            return token.strip()
    if x_api_key and x_api_key.strip():
        return x_api_key.strip()
    return None


def parse_key_file(text: str, where: str) -> list[str]:
    """Return the keys of a key file: one per line, ``#`` starts a comment, blank lines ignored.

    Raise ConfigError naming ``where`` and the line for a malformed key (never the key).
    """
    keys = []
    for number, line in enumerate(text.splitlines(), start=1):
        key = line.split("#", 1)[0].strip()
        if not key:
            continue
        problem = api_key_problem(key)
        if problem is not None:
            raise ConfigError(f"{where}, line {number}: {problem}; expected one key of visible ASCII characters")
        keys.append(key)
    return keys


def load_keys(server: ServerConfig) -> Keys:
    """Return the keys of server.api_keys and server.api_key_file; ConfigError if the file is unusable."""
    keys = list(server.api_keys)
    path = server.api_key_file
    if path:
        where = f"server.api_key_file {path}"
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as err:
            raise ConfigError(f"cannot read {where}: {err.strerror or err}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"{where} is not UTF-8 text") from None
        found = parse_key_file(text, where)
        if not found:
            # An empty file must not quietly leave a public server open.
            raise ConfigError(f"{where} holds no key")
        keys += found
    return Keys(keys)


def per_key_scope(config: Config) -> bool:
    """Tell whether each API key gets its own KV cache scope (cache.scope, ``auto`` resolved)."""
    if config.cache.scope == "auto":
        return bool(config.server.api_keys or config.server.api_key_file)
    return config.cache.scope == "per_key"


def cache_scope(tenant_scope: str, salt: str | None) -> str:
    """Return the Generate.cache_scope for a key's scope ("" when shared) and a request's salt.

    "" is the shared scope. Both parts are length-framed before hashing, so no pair
    of (key, salt) can be made to equal another.
    """
    if not tenant_scope and not salt:
        return ""
    h = hashlib.blake2b(digest_size=16, person=_SCOPE_PERSON)
    for part in (tenant_scope, salt or ""):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _digest(key: str) -> bytes:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=32, person=_DIGEST_PERSON).digest()


def _scope_of(key: str) -> str:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=16, person=_SCOPE_PERSON).hexdigest()
