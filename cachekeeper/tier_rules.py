"""The shared cache tier's rules, without sockets: key names, the deepest usable hit, health.

The tier is a Redis-protocol server (Redis, Valkey) that the cachekeepers of a fleet
share behind their own stores (cachekeeper.tier). Its layout, under the fleet's
``cache.shared_prefix``::

    {prefix}e:{entry key}                          the entry file's bytes, as on disk
    {prefix}b:{fingerprint hex}:{block hash hex}   the key of an entry holding that block

An entry is stored as its file is (header, zstd payload, both CRC-32 checked), so a
fetched entry goes through the code that checks disk entries before it is used. Block
hashes are chained (shared.prefix), so an entry holding block d holds every block
before it: a lookup reads the index keys of its deeper blocks in one MGET and tries
their entries deepest first. An index key names the last entry pushed with that block
(the most recent, as the local index prefers too, and under LRU the last to go). Redis
evicts under its own ``maxmemory`` policy, entry and index keys independently: an index
key whose entry is gone is a miss at that depth (the next shallower candidate is tried),
until an entry holding that block is pushed again and takes the key over.

The fingerprint stays in the index keys although the chain starts from it: an operator
can then drop one model's index (``SCAN MATCH {prefix}b:{fingerprint}:*``), and a key
read by hand says which model it belongs to.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Final

from reame.shared.prefix import is_entry_key

# A tier that failed is tried again after FIRST_BACKOFF_S, then twice as long after each
# failed retry, up to MAX_BACKOFF_S: a fleet's Redis restart is noticed within seconds,
# a long outage costs one probe every half minute (on the tier's thread, never a lookup).
FIRST_BACKOFF_S: Final = 1.0
MAX_BACKOFF_S: Final = 30.0


def entry_name(prefix: str, key: str) -> str:
    """Return the Redis key holding an entry's bytes."""
    return f"{prefix}e:{key}"


def block_name(prefix: str, fingerprint: bytes, block: bytes) -> str:
    """Return the Redis key naming the entry that holds ``block`` (a chained block hash)."""
    return f"{prefix}b:{fingerprint.hex()}:{block.hex()}"


def block_names(prefix: str, fingerprint: bytes, blocks: Sequence[bytes], start: int = 0) -> list[str]:
    """Return the index keys of ``blocks[start:]``, i.e. of depths start + 1 to len(blocks)."""
    return [block_name(prefix, fingerprint, block) for block in blocks[start:]]


def min_gain_blocks(min_tokens: int, block_tokens: int) -> int:
    """Return how many blocks deeper than the local store a remote entry must go to be fetched.

    The worker stores a prompt only when it adds ``cache.min_tokens`` to what is stored
    (worker.cache_policy); an entry deeper by less would not be worth its transfer either.
    """
    return max(1, math.ceil(min_tokens / block_tokens))


def worth_probing(n_blocks: int, local_depth: int, min_gain: int) -> bool:
    """Tell whether the tier could hold something worth fetching for this lookup."""
    return n_blocks - local_depth >= min_gain


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """An entry the tier's index names for a lookup, at the deepest depth it covers."""

    key: str
    depth: int


def candidates(found: Sequence[bytes | str | None], first_depth: int) -> list[Candidate]:
    """Return the entries named by an MGET of the index keys from depth ``first_depth`` on, deepest first.

    ``found[i]`` is the value of the index key at depth ``first_depth + i`` (None when
    absent or evicted). Each entry appears once, at its deepest depth; a value that is
    not an entry key (damage, another program's key) is ignored.
    """
    seen: set[str] = set()
    chosen: list[Candidate] = []
    for offset in range(len(found) - 1, -1, -1):
        value = found[offset]
        key = value.decode("ascii", "replace") if isinstance(value, bytes) else value
        if key is None or not is_entry_key(key) or key in seen:
            continue
        seen.add(key)
        chosen.append(Candidate(key, first_depth + offset))
    return chosen


class Health:
    """Whether the tier is thought up, and when to try it again since it went down.

    No clock of its own: every call that needs the time is given ``now``. A failure
    while up takes it down (and says so, to log it once); while down, nothing asks the
    tier but the retry when it is due, and each failed retry doubles the wait.
    """

    def __init__(self, first_s: float = FIRST_BACKOFF_S, max_s: float = MAX_BACKOFF_S) -> None:
        if not 0 < first_s <= max_s:
            raise ValueError(f"need 0 < first_s <= max_s, got {first_s} and {max_s}")
        self._first_s = first_s
        self._max_s = max_s
        self._backoff_s = first_s
        self._retry_at: float | None = None  # None: up

    @property
    def up(self) -> bool:
        return self._retry_at is None

    def failed(self, now: float) -> bool:
        """Record a failure; return True if it took the tier down (log that once)."""
        went_down = self._retry_at is None
        if went_down:
            self._backoff_s = self._first_s
        else:
            self._backoff_s = min(self._backoff_s * 2, self._max_s)
        self._retry_at = now + self._backoff_s
        return went_down

    def succeeded(self) -> bool:
        """Record a success; return True if the tier was down (log that it is back)."""
        was_down = self._retry_at is not None
        self._retry_at = None
        self._backoff_s = self._first_s
        return was_down

    def retry_in(self, now: float) -> float | None:
        """Return the seconds until the next retry is due (0 if it is), None while up."""
        if self._retry_at is None:
            return None
        return max(0.0, self._retry_at - now)
