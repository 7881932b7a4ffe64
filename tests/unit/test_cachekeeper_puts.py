"""Collecting puts: checks, limits, chunk accounting and expiry, without sockets."""

from __future__ import annotations

import pytest

from reame.cachekeeper.puts import Accepted, Failed, FinishedPut, PartialPuts, Progress, Reason, check_put
from reame.shared.prefix import entry_key
from reame.shared.protocol import CacheChunk, CachePut

FP = b"model"
W1, W2 = b"worker-1", b"worker-2"


def put(
    request_id: str = "r1", raw_len: int = 10, tokens: list[int] | None = None, *,
    fingerprint: str = FP.hex(), kv_type: str = "f16",
) -> CachePut:
    return CachePut(request_id, fingerprint, kv_type, tokens or [1, 2, 3], raw_len)


def chunk(data: bytes, last: bool = False, request_id: str = "r1") -> CacheChunk:
    return CacheChunk(request_id, data, last)


def test_a_put_is_collected_and_finished_by_its_last_chunk() -> None:
    puts = PartialPuts(100)
    assert puts.begin(W1, put(), 0.0) == Accepted(entry_key(FP, [1, 2, 3]))
    assert puts.feed(W1, chunk(b"abcd"), 1.0) is Progress.MORE
    assert puts.feed(W1, chunk(b"efgh"), 2.0) is Progress.MORE
    done = puts.feed(W1, chunk(b"ij", last=True), 3.0)
    assert isinstance(done, FinishedPut)
    assert (done.identity, done.request_id, done.fingerprint, done.kv_type, done.tokens) == (
        W1, "r1", FP, "f16", [1, 2, 3])
    assert b"".join(done.chunks) == b"abcdefghij" and done.raw_len == 10
    # Handed to the writer: it still holds memory until the writer answers.
    assert puts.in_progress == 1
    puts.written()
    assert puts.in_progress == 0
    assert puts.feed(W1, chunk(b"late", last=True), 4.0) is Progress.UNKNOWN


def test_puts_are_told_apart_by_worker_and_request() -> None:
    puts = PartialPuts(100)
    assert isinstance(puts.begin(W1, put(raw_len=2), 0.0), Accepted)
    assert isinstance(puts.begin(W2, put(raw_len=3), 0.0), Accepted)
    assert puts.feed(W2, chunk(b"x"), 0.0) is Progress.MORE
    one = puts.feed(W1, chunk(b"aa", last=True), 0.0)
    two = puts.feed(W2, chunk(b"yz", last=True), 0.0)
    assert isinstance(one, FinishedPut) and one.chunks == [b"aa"]
    assert isinstance(two, FinishedPut) and two.chunks == [b"x", b"yz"]
    assert puts.feed(W1, chunk(b"?", request_id="r9"), 0.0) is Progress.UNKNOWN


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (put(fingerprint="zz"), Reason.INVALID),
        (put(fingerprint=""), Reason.INVALID),
        (put(kv_type=""), Reason.INVALID),
        (put(kv_type="x" * 100), Reason.INVALID),
        (put(raw_len=0), Reason.INVALID),
        (put(raw_len=-5), Reason.INVALID),
        (CachePut("r1", FP.hex(), "f16", [], 10), Reason.INVALID),
        (put(tokens=[1, 2**40]), Reason.INVALID),
        (put(raw_len=101), Reason.TOO_BIG),
    ],
)
def test_malformed_or_oversized_puts_are_refused(bad: CachePut, reason: Reason) -> None:
    puts = PartialPuts(100)
    assert check_put(bad, 100) is reason
    assert puts.begin(W1, bad, 0.0) is reason
    assert puts.in_progress == 0
    assert puts.feed(W1, chunk(b"x", last=True), 0.0) is Progress.UNKNOWN


def test_chunks_that_do_not_add_up_fail_the_put() -> None:
    puts = PartialPuts(100)
    puts.begin(W1, put(raw_len=4), 0.0)
    assert puts.feed(W1, chunk(b"abc", last=True), 0.0) == Failed("r1", Reason.BAD_LENGTH)
    puts.begin(W1, put(raw_len=4), 0.0)
    assert puts.feed(W1, chunk(b"abc"), 0.0) is Progress.MORE
    # More than announced fails at once, before the last chunk: memory stays bounded.
    assert puts.feed(W1, chunk(b"de"), 0.0) == Failed("r1", Reason.BAD_LENGTH)
    assert puts.in_progress == 0


def test_at_most_max_puts_hold_memory_at_once() -> None:
    puts = PartialPuts(100, max_puts=2)
    assert isinstance(puts.begin(W1, put("a", raw_len=1), 0.0), Accepted)
    assert isinstance(puts.begin(W1, put("b", raw_len=1), 0.0), Accepted)
    assert puts.begin(W2, put("c", raw_len=1), 0.0) is Reason.BUSY
    assert isinstance(puts.feed(W1, chunk(b"x", True, "a"), 0.0), FinishedPut)
    # Finished but not yet written: still counted.
    assert puts.begin(W2, put("c", raw_len=1), 0.0) is Reason.BUSY
    puts.written()
    assert isinstance(puts.begin(W2, put("c", raw_len=1), 0.0), Accepted)


def test_the_same_request_begun_again_starts_over() -> None:
    puts = PartialPuts(100, max_puts=1)
    puts.begin(W1, put(raw_len=2), 0.0)
    puts.feed(W1, chunk(b"a"), 0.0)
    assert isinstance(puts.begin(W1, put(raw_len=2), 0.0), Accepted)  # not BUSY: it replaces itself
    done = puts.feed(W1, chunk(b"bc", last=True), 0.0)
    assert isinstance(done, FinishedPut) and done.chunks == [b"bc"]


def test_idle_puts_expire_and_active_ones_do_not() -> None:
    puts = PartialPuts(100, idle_s=30.0)
    puts.begin(W1, put("quiet", raw_len=5), 0.0)
    puts.begin(W2, put("busy", raw_len=5), 0.0)
    puts.feed(W2, chunk(b"a", request_id="busy"), 25.0)
    assert puts.expire(30.0) == []
    assert puts.expire(31.0) == [(W1, Failed("quiet", Reason.EXPIRED))]
    assert puts.feed(W1, chunk(b"abcde", True, "quiet"), 31.0) is Progress.UNKNOWN
    assert puts.expire(56.0) == [(W2, Failed("busy", Reason.EXPIRED))]
    assert puts.in_progress == 0


def test_drop_and_clear_forget_puts() -> None:
    puts = PartialPuts(100)
    puts.begin(W1, put("a"), 0.0)
    puts.begin(W1, put("b"), 0.0)
    assert puts.drop(W1, "a") and not puts.drop(W1, "a")
    assert puts.clear() == 1 and puts.in_progress == 0


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        PartialPuts(0)
