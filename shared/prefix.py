"""Name token prefixes by chained block hashes, so stored KV states can be found by prefix.

A prompt's tokens are cut into blocks of ``block_tokens``; only full blocks get a
hash. The hashes are chained: ``h_0 = H(fingerprint)`` and
``h_i = H(h_{i-1} || tokens of block i as little-endian int32)``, so block i's
hash stands for the model and every token up to the end of block i. Two prompts
that share their first k full blocks share their first k hashes, whatever follows.

``H`` is BLAKE2b with a 16-byte digest: these names are compared, never trusted
for security, and 128 bits keep accidental collisions out of reach.

A cache scope (``Generate.cache_scope``, e.g. one per API key) enters the chain at
its root: the worker files and looks up a scope's entries under
:func:`scoped_fingerprint`, so no block hash, entry key or stored entry of one
scope can match another's, and the cachekeeper needs to know nothing of scopes.
"""

from __future__ import annotations

import array
import hashlib
import sys
from collections.abc import Sequence
from typing import Final

HASH_BYTES: Final = 16
# Entry keys hash the whole token list under a different personalisation, so an
# entry key can never equal a block hash.
_ENTRY_PERSON: Final = b"reame-entry"
_SCOPE_PERSON: Final = b"reame-scope"
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1


def token_bytes(tokens: Sequence[int]) -> bytes:
    """Pack token ids as little-endian int32, raising ValueError for an id out of range."""
    try:
        packed = array.array("i", tokens)
    except OverflowError as err:
        bad = next((t for t in tokens if not _INT32_MIN <= t <= _INT32_MAX), None)
        raise ValueError(f"token id {bad} does not fit in int32") from err
    except TypeError as err:
        raise ValueError(f"token ids must be integers: {err}") from err
    if packed.itemsize != 4:  # pragma: no cover - no supported platform has a non-32-bit C int
        raise RuntimeError("array('i') is not 32 bits on this platform")
    if sys.byteorder == "big":  # pragma: no cover - the format is little-endian everywhere
        packed.byteswap()
    return packed.tobytes()


def tokens_from_bytes(data: bytes) -> tuple[int, ...]:
    """Unpack little-endian int32 token ids written by :func:`token_bytes`."""
    if len(data) % 4:
        raise ValueError(f"token bytes length {len(data)} is not a multiple of 4")
    packed = array.array("i")
    packed.frombytes(data)
    if sys.byteorder == "big":  # pragma: no cover
        packed.byteswap()
    return tuple(packed)


def scoped_fingerprint(fingerprint: bytes, scope: str) -> bytes:
    """Return the fingerprint a cache scope's entries are filed under; the model's own for "" (shared)."""
    if not scope:
        return fingerprint
    h = hashlib.blake2b(digest_size=max(1, min(len(fingerprint), 64)), person=_SCOPE_PERSON)
    # Length-framed, so no (fingerprint, scope) pair can mimic another.
    h.update(len(fingerprint).to_bytes(8, "little") + fingerprint)
    h.update(scope.encode("utf-8", "surrogatepass"))
    return h.digest()


def root_hash(fingerprint: bytes) -> bytes:
    """Return h_0, the hash of the model fingerprint that every chain starts from."""
    return hashlib.blake2b(fingerprint, digest_size=HASH_BYTES).digest()


def block_hashes(fingerprint: bytes, tokens: Sequence[int], block_tokens: int) -> list[bytes]:
    """Return the chained hashes h_1..h_n of the n full blocks of ``tokens``."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be at least 1, got {block_tokens}")
    view = memoryview(token_bytes(tokens))
    step = 4 * block_tokens
    full = len(tokens) // block_tokens
    hashes: list[bytes] = []
    previous = root_hash(fingerprint)
    for i in range(full):
        h = hashlib.blake2b(previous, digest_size=HASH_BYTES)
        h.update(view[i * step : (i + 1) * step])
        previous = h.digest()
        hashes.append(previous)
    return hashes


def entry_key(fingerprint: bytes, tokens: Sequence[int]) -> str:
    """Return the hex name of an entry covering exactly ``tokens`` for this model."""
    h = hashlib.blake2b(root_hash(fingerprint), digest_size=HASH_BYTES, person=_ENTRY_PERSON)
    h.update(token_bytes(tokens))
    return h.hexdigest()


def is_entry_key(text: str) -> bool:
    """Tell whether ``text`` has the shape of an entry key (lower-case hex of HASH_BYTES)."""
    return len(text) == 2 * HASH_BYTES and all(c in "0123456789abcdef" for c in text)
