"""Lookups parked behind puts under way: which wait, what releases them. No sockets, no clock."""

from __future__ import annotations

import pytest

from reame.cachekeeper.pending import Pending, PutId, shared_blocks
from reame.shared.prefix import block_hashes
from reame.shared.protocol import CacheLookup

FP = b"model-fingerprint"
OTHER_FP = b"other-fingerprint"
BT = 4
DOC = list(range(100, 140))  # ten blocks
PUT: PutId = (b"uploader-0", "put-1")
NOW = 1000.0


def chain(tokens: list[int], fingerprint: bytes = FP) -> list[bytes]:
    return block_hashes(fingerprint, tokens, BT)


def lookup(tokens: list[int], wait_ms: int = 500, request_id: str = "l1", fingerprint: bytes = FP) -> CacheLookup:
    return CacheLookup(request_id, fingerprint.hex(), chain(tokens, fingerprint), wait_ms)


def nothing_stored() -> int:
    return 0


def with_put(put: PutId = PUT, tokens: list[int] = DOC) -> Pending:
    pending = Pending()
    pending.add_put(put, FP, chain(tokens))
    return pending


def test_shared_blocks_counts_the_common_head_of_two_chains() -> None:
    doc = chain(DOC)
    assert shared_blocks(doc, doc) == 10
    assert shared_blocks(doc, chain([*DOC[:22], 7, 7, 7, 7, 7, 7])) == 5
    assert shared_blocks(doc, chain(DOC[:12])) == 3
    assert shared_blocks(doc, chain([9] * 40)) == 0
    assert shared_blocks(doc, []) == 0 and shared_blocks([], doc) == 0


def test_a_lookup_deeper_into_a_pending_put_than_the_store_waits_until_the_put_ends() -> None:
    pending = with_put()
    question = lookup([*DOC, 1, 2, 3])
    assert pending.park(b"w1", question, FP, nothing_stored, NOW)
    assert pending.parked == 1 and pending.next_deadline() == NOW + 0.5
    assert pending.finish_put((b"uploader-0", "another")) == []
    (released,) = pending.finish_put(PUT)
    assert (released.identity, released.lookup, released.fingerprint) == (b"w1", question, FP)
    assert pending.parked == 0 and pending.puts == 0 and pending.next_deadline() is None


def test_a_lookup_the_store_answers_as_well_does_not_wait() -> None:
    pending = with_put()
    assert not pending.park(b"w1", lookup(DOC), FP, lambda: 10, NOW)
    # The store holds the first 8 blocks; the put would give 10: worth the wait.
    assert pending.park(b"w1", lookup(DOC), FP, lambda: 8, NOW)


def test_the_store_is_asked_only_when_a_pending_put_shares_a_block() -> None:
    pending = with_put()

    def store_depth() -> int:
        raise AssertionError("the store was asked for a lookup no put could answer")

    assert not pending.park(b"w1", lookup([9] * 40), FP, store_depth, NOW)
    assert not pending.park(b"w1", lookup(DOC, fingerprint=OTHER_FP), OTHER_FP, store_depth, NOW)
    assert not Pending().park(b"w1", lookup(DOC), FP, store_depth, NOW)
    assert not pending.park(b"w1", lookup(DOC, wait_ms=0), FP, store_depth, NOW)
    assert pending.parked == 0


def test_the_deepest_pending_put_is_the_one_waited_for() -> None:
    shallow: PutId = (b"uploader-1", "short")
    pending = with_put(shallow, DOC[:8])
    pending.add_put(PUT, FP, chain(DOC))
    assert pending.deepest_put(FP, chain(DOC)) == (PUT, 10)
    assert pending.park(b"w1", lookup(DOC), FP, nothing_stored, NOW)
    assert pending.finish_put(shallow) == []
    assert [parked.identity for parked in pending.finish_put(PUT)] == [b"w1"]


def test_patience_runs_out() -> None:
    pending = with_put()
    assert pending.park(b"w1", lookup(DOC, wait_ms=300), FP, nothing_stored, NOW)
    assert pending.park(b"w2", lookup(DOC, wait_ms=800), FP, nothing_stored, NOW)
    assert pending.next_deadline() == NOW + 0.3
    assert pending.expire(NOW + 0.2) == []
    assert [parked.identity for parked in pending.expire(NOW + 0.3)] == [b"w1"]
    assert pending.next_deadline() == NOW + 0.8
    assert [parked.identity for parked in pending.expire(NOW + 5)] == [b"w2"]
    assert pending.puts == 1  # the put goes on; only the lookups stopped waiting


def test_a_wish_to_wait_long_is_capped() -> None:
    pending = Pending(max_wait_s=2.0)
    pending.add_put(PUT, FP, chain(DOC))
    assert pending.park(b"w1", lookup(DOC, wait_ms=3_600_000), FP, nothing_stored, NOW)
    assert pending.next_deadline() == NOW + 2.0


def test_a_new_lookup_from_the_same_worker_replaces_the_parked_one() -> None:
    pending = with_put()
    assert pending.park(b"w1", lookup(DOC, request_id="old"), FP, nothing_stored, NOW)
    assert pending.park(b"w1", lookup(DOC, request_id="new"), FP, nothing_stored, NOW + 1)
    (released,) = pending.finish_put(PUT)
    assert released.lookup.request_id == "new"


def test_cancel_forgets_a_parked_lookup() -> None:
    pending = with_put()
    assert pending.cancel(b"w1") is None
    assert pending.park(b"w1", lookup(DOC), FP, nothing_stored, NOW)
    cancelled = pending.cancel(b"w1")
    assert cancelled is not None and cancelled.lookup.request_id == "l1"
    assert pending.finish_put(PUT) == []


def test_parked_lookups_are_bounded() -> None:
    pending = Pending(max_parked=2)
    pending.add_put(PUT, FP, chain(DOC))
    assert pending.park(b"w1", lookup(DOC), FP, nothing_stored, NOW)
    assert pending.park(b"w2", lookup(DOC), FP, nothing_stored, NOW)
    assert not pending.park(b"w3", lookup(DOC), FP, nothing_stored, NOW)
    assert pending.park(b"w2", lookup(DOC), FP, nothing_stored, NOW)  # replacing its own takes no room


def test_a_restarted_put_replaces_its_chain() -> None:
    pending = with_put()
    pending.add_put(PUT, FP, chain([9] * 40))
    assert pending.puts == 1 and pending.deepest_put(FP, chain(DOC)) is None


def test_clear_drops_everything() -> None:
    pending = with_put()
    assert pending.park(b"w1", lookup(DOC), FP, nothing_stored, NOW)
    assert pending.clear() == 1
    assert (pending.puts, pending.parked) == (0, 0)


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError):
        Pending(max_wait_s=-1)
    with pytest.raises(ValueError):
        Pending(max_parked=-1)
