"""Lookups that wait for a save under way, so a prefix just computed is not computed again.

A worker saves its prompt's state right after its reply, and the save takes a while
to arrive, compress and fsync. A lookup for the same document in that window would
miss, and its worker would read the whole document a second time (seconds to
minutes) for want of a state that is milliseconds from being stored. So while a put
is pending (being received, queued for the writer, or being written) its block-hash
chain is kept here, and a lookup whose blocks go deeper into a pending put than into
anything stored is parked until that put ends, committed or not, or until the
lookup's own patience (``CacheLookup.wait_ms``, capped) runs out. Then the loop
answers it from the store as it is at that moment: a hit on the new entry, or
whatever was there before.

No sockets and no clock here: the loop passes ``now`` and sends what these methods
return. :func:`check_lookup` vets a lookup before anything here sees it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Final

from reame.shared.prefix import HASH_BYTES
from reame.shared.protocol import CacheLookup

# A worker asks for half its cache.timeout (1 s by default); a longer wish is a
# misconfiguration, and a lookup parked longer than this is no longer worth keeping.
MAX_WAIT_S: Final = 10.0
# At most one parked lookup per worker socket (a new lookup replaces the last), so
# this only bounds what clients that are not workers can make the keeper hold.
MAX_PARKED: Final = 256

# A lookup for a 64k-token prompt at one token per block; beyond that it is garbage.
MAX_LOOKUP_BLOCKS: Final = 1 << 16

PutId = tuple[bytes, str]  # (worker identity, put request id), as in cachekeeper.puts


@dataclasses.dataclass(frozen=True, slots=True)
class Parked:
    """A lookup waiting for a put; answer it from the store when it is released."""

    identity: bytes
    lookup: CacheLookup
    fingerprint: bytes
    put: PutId
    deadline: float


@dataclasses.dataclass(frozen=True, slots=True)
class _Put:
    fingerprint: bytes
    chain: tuple[bytes, ...]


def shared_blocks(a: Sequence[bytes], b: Sequence[bytes]) -> int:
    """Return how many leading block hashes ``a`` and ``b`` have in common.

    Block hashes are chained (shared.prefix), so equal hashes at i mean equal hashes
    at every position before it: a binary search finds the depth in log2 steps.
    """
    present, absent = 0, min(len(a), len(b)) + 1
    while absent - present > 1:
        middle = (present + absent) // 2
        if a[middle - 1] == b[middle - 1]:
            present = middle
        else:
            absent = middle
    return present


class Pending:
    """The block chains of the puts under way and the lookups waiting for them."""

    def __init__(self, *, max_wait_s: float = MAX_WAIT_S, max_parked: int = MAX_PARKED) -> None:
        if max_wait_s < 0 or max_parked < 0:
            raise ValueError(f"need non-negative limits, got {max_wait_s}, {max_parked}")
        self._max_wait_s = max_wait_s
        self._max_parked = max_parked
        self._puts: dict[PutId, _Put] = {}
        self._parked: dict[bytes, Parked] = {}  # by the waiting worker's identity

    @property
    def puts(self) -> int:
        return len(self._puts)

    @property
    def parked(self) -> int:
        return len(self._parked)

    def add_put(self, put: PutId, fingerprint: bytes, chain: Sequence[bytes]) -> None:
        """Remember a put that was accepted; one restarted under the same id replaces the old."""
        self._puts[put] = _Put(fingerprint, tuple(chain))

    def deepest_put(self, fingerprint: bytes, blocks: Sequence[bytes]) -> tuple[PutId, int] | None:
        """Return the pending put sharing the most leading blocks with a lookup, and how many."""
        best: tuple[PutId, int] | None = None
        for put_id, put in self._puts.items():
            if put.fingerprint != fingerprint:
                continue
            depth = shared_blocks(put.chain, blocks)
            if depth > 0 and (best is None or depth > best[1]):
                best = (put_id, depth)
        return best

    def park(
        self, identity: bytes, lookup: CacheLookup, fingerprint: bytes, store_depth: Callable[[], int], now: float
    ) -> bool:
        """Park the lookup if a pending put goes deeper than the store; return whether it waits.

        ``store_depth`` (the blocks the store's best entry shares) is asked only when a
        pending put shares any block, so a lookup with nothing pending costs no extra query.
        """
        self.cancel(identity)  # a worker asks one thing at a time: a new lookup ends the last
        wait_s = min(max(lookup.wait_ms, 0) / 1000, self._max_wait_s)
        if wait_s <= 0 or len(self._parked) >= self._max_parked:
            return False
        found = self.deepest_put(fingerprint, lookup.blocks)
        if found is None:
            return False
        put_id, depth = found
        if depth <= store_depth():
            return False
        self._parked[identity] = Parked(identity, lookup, fingerprint, put_id, now + wait_s)
        return True

    def cancel(self, identity: bytes) -> Parked | None:
        """Forget the lookup a worker had parked, if any (it gave up, or asked again)."""
        return self._parked.pop(identity, None)

    def finish_put(self, put: PutId) -> list[Parked]:
        """Forget a put that ended (stored, refused, failed or expired); return the lookups it releases."""
        self._puts.pop(put, None)
        return self._release(lambda parked: parked.put == put)

    def expire(self, now: float) -> list[Parked]:
        """Return the lookups whose patience ran out, and forget them."""
        return self._release(lambda parked: parked.deadline <= now)

    def next_deadline(self) -> float | None:
        """Return when the first parked lookup runs out of patience, None if none waits."""
        return min((parked.deadline for parked in self._parked.values()), default=None)

    def clear(self) -> int:
        """Drop everything (at shutdown); return how many lookups were waiting."""
        count = len(self._parked)
        self._puts.clear()
        self._parked.clear()
        return count

    def _release(self, which: Callable[[Parked], bool]) -> list[Parked]:
        released = [parked for parked in self._parked.values() if which(parked)]
        for parked in released:
            del self._parked[parked.identity]
        return released


def check_lookup(lookup: CacheLookup) -> bytes | str:
    """Return the lookup's fingerprint as bytes, or what is wrong with it."""
    try:
        fingerprint = bytes.fromhex(lookup.fingerprint)
    except ValueError:
        return f"fingerprint {lookup.fingerprint[:40]!r} is not hex"
    if not fingerprint:
        return "empty fingerprint"
    if len(lookup.blocks) > MAX_LOOKUP_BLOCKS:
        return f"{len(lookup.blocks)} blocks (at most {MAX_LOOKUP_BLOCKS})"
    bad = next((i for i, block in enumerate(lookup.blocks) if len(block) != HASH_BYTES), None)
    if bad is not None:
        return f"block {bad} is {len(lookup.blocks[bad])} bytes, not {HASH_BYTES}"
    return fingerprint
