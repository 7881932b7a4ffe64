"""The worker's cache client against a fake cachekeeper: a real ROUTER in a thread, scripted replies."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from reame.shared import protocol as p
from reame.shared.kv_entry import CorruptEntry, EntryHeader, decode_header, encode_payload
from reame.shared.prefix import block_hashes
from reame.worker.cache_client import CacheClient, lookup_wait_ms
from tests.waiting import PATIENCE_S, wait_for

FINGERPRINT = bytes(range(32))
TOKENS = list(range(1000, 1040))
# The client's timeout when the keeper answers: an upper bound only, so that a busy machine
# is never taken for a silent keeper.
ANSWERED_S = 30.0
SILENCE_S = 0.3  # the client's timeout where the keeper's silence is the point of the test
NEVER_S = 600.0  # a timeout no test may wait out
WAIT_S = PATIENCE_S  # upper bound for anything to happen; tests never sleep for it

Handler = Callable[[p.Message], list[p.Message]]


class FakeKeeper:
    """A ROUTER on its own thread; ``handler`` turns each message it gets into its replies."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], address: str, handler: Handler) -> None:
        self.handler = handler
        self.received: list[p.Message] = []
        self._context = context
        self._address = address
        self._stop = threading.Event()
        self._bound = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._bound.wait(WAIT_S)

    def _run(self) -> None:
        sock = self._context.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(self._address)
        self._bound.set()
        try:
            while not self._stop.is_set():
                if not sock.poll(20):
                    continue
                identity, payload = sock.recv_multipart()
                message = p.decode(payload)
                self.received.append(message)
                for reply in self.handler(message):
                    sock.send_multipart([identity, p.encode(reply)])
        finally:
            sock.close(linger=0)

    def of_kind(self, kind: type[p.Message]) -> list[p.Message]:
        return [m for m in self.received if isinstance(m, kind)]

    def wait_for(self, condition: Callable[[], bool]) -> None:
        wait_for(condition, WAIT_S, interval=0.005, what="the keeper to get what the test waits for")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def entry_for(tokens: list[int], raw: bytes) -> tuple[EntryHeader, bytes]:
    payload = encode_payload(raw, level=1)
    return EntryHeader.build(FINGERPRINT, "f16", tokens, 8, payload, 0.0), payload.data


def serve_entry(header: EntryHeader, data: bytes, pieces: int = 3) -> Handler:
    """Answer every lookup with a hit streaming ``data`` in ``pieces`` chunks."""

    def handle(message: p.Message) -> list[p.Message]:
        if not isinstance(message, p.CacheLookup):
            return []
        step = max(1, len(data) // pieces)
        cuts = [*range(0, len(data), step), len(data)]
        chunks: list[p.Message] = [
            p.CacheChunk(message.request_id, data[a:b], b == len(data)) for a, b in itertools.pairwise(cuts)
        ]
        return [p.CacheHit(message.request_id, header.key(), header.encode(), 32), *chunks]

    return handle


def silent(message: p.Message) -> list[p.Message]:
    return []


@pytest.fixture
def context() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield ctx
    ctx.term()


@pytest.fixture
def address(tmp_path: Path) -> str:
    return f"ipc://{tmp_path}/cache.ipc"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def keepers() -> Iterator[list[FakeKeeper]]:
    started: list[FakeKeeper] = []
    yield started
    for keeper in started:
        keeper.stop()


@pytest.fixture
def make(
    context: zmq.Context[zmq.Socket[bytes]], address: str, clock: Clock, keepers: list[FakeKeeper]
) -> Iterator[Callable[..., tuple[CacheClient, FakeKeeper]]]:
    clients: list[CacheClient] = []

    def build(handler: Handler, pending: int = 2, timeout: float = ANSWERED_S) -> tuple[CacheClient, FakeKeeper]:
        keeper = FakeKeeper(context, address, handler)
        keepers.append(keeper)
        client = CacheClient(
            context, address, FINGERPRINT, "f16", timeout, retry_after=5.0, pending=pending, clock=clock
        )
        clients.append(client)
        return client, keeper

    yield build
    for client in clients:
        client.close()


def blocks(tokens: list[int] = TOKENS) -> list[bytes]:
    return block_hashes(FINGERPRINT, tokens, 8)


# -- lookups ---------------------------------------------------------------------------


def test_hit_streams_chunks_and_returns_the_raw_state(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    raw = random.Random(1).randbytes(300_000)
    header, data = entry_for(TOKENS, raw)
    client, keeper = make(serve_entry(header, data, pieces=4))
    fetched = client.lookup(FINGERPRINT, blocks())
    assert fetched is not None
    assert bytes(fetched.state) == raw
    assert fetched.header == header and fetched.key == header.key()
    (lookup,) = keeper.of_kind(p.CacheLookup)
    assert isinstance(lookup, p.CacheLookup)
    assert lookup.fingerprint == FINGERPRINT.hex() and lookup.blocks == blocks()


def test_miss(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    def miss(message: p.Message) -> list[p.Message]:
        return [p.CacheMiss(message.request_id)] if isinstance(message, p.CacheLookup) else []

    client, _ = make(miss)
    assert client.lookup(FINGERPRINT, blocks()) is None
    assert client.available


def test_a_lookup_lets_the_keeper_wait_half_the_timeout_for_a_save_under_way(
    make: Callable[..., tuple[CacheClient, FakeKeeper]],
) -> None:
    def miss(message: p.Message) -> list[p.Message]:
        return [p.CacheMiss(message.request_id)] if isinstance(message, p.CacheLookup) else []

    client, keeper = make(miss, timeout=3.0)
    assert client.lookup(FINGERPRINT, blocks()) is None
    (lookup,) = keeper.of_kind(p.CacheLookup)
    # Half: the keeper's answer, after the longest wait, still comes well within the timeout.
    assert isinstance(lookup, p.CacheLookup) and lookup.wait_ms == 1500
    assert lookup_wait_ms(1.0) == 500 and lookup_wait_ms(0.0) == 0


def test_no_blocks_sends_nothing(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    client, keeper = make(silent)
    assert client.lookup(FINGERPRINT, []) is None
    assert keeper.received == [] and client.available


def test_corrupt_chunk_is_reported_and_gives_none(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    header, data = entry_for(TOKENS, random.Random(2).randbytes(50_000))
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= 0x10
    client, keeper = make(serve_entry(header, bytes(damaged)))
    assert client.lookup(FINGERPRINT, blocks()) is None
    keeper.wait_for(lambda: bool(keeper.of_kind(p.CacheCorrupt)))
    (report,) = keeper.of_kind(p.CacheCorrupt)
    assert report == p.CacheCorrupt(header.key(), "payload checksum mismatch")
    assert client.available  # a bad entry is no reason to distrust the cachekeeper


def test_corrupt_header_is_reported(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    header, data = entry_for(TOKENS, b"x" * 1000)
    encoded = bytearray(header.encode())
    encoded[-3] ^= 1

    def handle(message: p.Message) -> list[p.Message]:
        if not isinstance(message, p.CacheLookup):
            return []
        return [p.CacheHit(message.request_id, header.key(), bytes(encoded), 32),
                p.CacheChunk(message.request_id, data, True)]

    client, keeper = make(handle)
    assert client.lookup(FINGERPRINT, blocks()) is None
    keeper.wait_for(lambda: bool(keeper.of_kind(p.CacheCorrupt)))
    report = keeper.of_kind(p.CacheCorrupt)[0]
    assert isinstance(report, p.CacheCorrupt) and "header checksum" in report.reason


def test_aborted_transfer_is_a_miss(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    header, data = entry_for(TOKENS, b"y" * 5000)

    def handle(message: p.Message) -> list[p.Message]:
        if not isinstance(message, p.CacheLookup):
            return []
        rid = message.request_id
        return [p.CacheHit(rid, header.key(), header.encode(), 32), p.CacheChunk(rid, data[:10], False),
                p.CacheMiss(rid)]

    client, keeper = make(handle)
    assert client.lookup(FINGERPRINT, blocks()) is None
    assert client.available
    assert keeper.of_kind(p.CacheCorrupt) == []


def test_silence_times_out_then_the_cache_is_skipped(
    make: Callable[..., tuple[CacheClient, FakeKeeper]], clock: Clock
) -> None:
    client, keeper = make(silent, timeout=SILENCE_S)
    assert client.lookup(FINGERPRINT, blocks()) is None
    assert not client.available
    assert client.lookup(FINGERPRINT, blocks()) is None  # skipped: not even sent
    assert not client.save(TOKENS, b"state")
    keeper.wait_for(lambda: len(keeper.received) >= 1)
    assert len(keeper.of_kind(p.CacheLookup)) == 1
    clock.now += 5.0
    assert client.available
    assert client.lookup(FINGERPRINT, blocks()) is None  # asked again (and again no answer)
    keeper.wait_for(lambda: len(keeper.of_kind(p.CacheLookup)) == 2)


def test_silence_in_the_middle_of_a_transfer_times_out(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    header, data = entry_for(TOKENS, b"z" * 5000)

    def handle(message: p.Message) -> list[p.Message]:
        if not isinstance(message, p.CacheLookup):
            return []
        return [p.CacheHit(message.request_id, header.key(), header.encode(), 32),
                p.CacheChunk(message.request_id, data[:10], False)]

    client, _ = make(handle, timeout=SILENCE_S)
    assert client.lookup(FINGERPRINT, blocks()) is None
    assert not client.available


def test_stale_replies_are_ignored(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    raw = random.Random(3).randbytes(40_000)
    header, data = entry_for(TOKENS, raw)
    other, other_data = entry_for(TOKENS[:16], random.Random(4).randbytes(40_000))
    previous: list[str] = []

    def handle(message: p.Message) -> list[p.Message]:
        if not isinstance(message, p.CacheLookup):
            return []
        rid = message.request_id
        stale: list[p.Message] = []
        if previous:  # leftovers of the previous conversation come first
            old = previous[-1]
            stale = [p.CacheChunk(old, other_data, True), p.CacheMiss(old),
                     p.CacheHit(old, other.key(), other.encode(), 16)]
        previous.append(rid)
        return [*stale, p.CacheHit(rid, header.key(), header.encode(), 32), p.CacheChunk(rid, data, True)]

    client, _ = make(handle)
    first = client.lookup(FINGERPRINT, blocks(), wanted=lambda h: False)
    assert first is None  # the header was enough to decline; its chunk is left behind
    second = client.lookup(FINGERPRINT, blocks())
    assert second is not None and bytes(second.state) == raw and second.header == header


def test_wanted_sees_the_header(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    header, data = entry_for(TOKENS, b"w" * 100)
    client, _ = make(serve_entry(header, data, pieces=1))
    seen: list[EntryHeader] = []

    def wanted(h: EntryHeader) -> bool:
        seen.append(h)
        return True

    assert client.lookup(FINGERPRINT, blocks(), wanted=wanted) is not None
    assert seen == [header]


def test_other_messages_are_dropped(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    client, keeper = make(silent, timeout=SILENCE_S)
    keeper.handler = lambda m: [p.Heartbeat()]  # not a lookup reply
    assert client.lookup(FINGERPRINT, blocks()) is None
    assert not client.available


# -- saves -----------------------------------------------------------------------------


def collect_puts(answer: Callable[[p.CachePut, bytes], p.CacheStored] | None) -> tuple[Handler, list[bytes]]:
    """Reassemble every put; ``answer`` gives the verdict after its last chunk (None: silence)."""
    blobs: list[bytes] = []
    current: dict[str, tuple[p.CachePut, bytearray]] = {}

    def handle(message: p.Message) -> list[p.Message]:
        if isinstance(message, p.CachePut):
            current[message.request_id] = (message, bytearray())
        elif isinstance(message, p.CacheChunk):
            put, buf = current[message.request_id]
            buf += message.data
            if message.last:
                blobs.append(bytes(buf))
                if answer is not None:
                    return [answer(put, bytes(buf))]
        return []

    return handle, blobs


class Outcome:
    def __init__(self) -> None:
        self.results: list[bool] = []
        self.event = threading.Event()

    def __call__(self, stored: bool) -> None:
        self.results.append(stored)
        self.event.set()

    def wait(self) -> bool:
        assert self.event.wait(WAIT_S), "the uploader never called back"
        return self.results[0]


def test_uploader_sends_put_and_chunks(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    state = random.Random(5).randbytes(2_500_000)
    handler, blobs = collect_puts(lambda put, raw: p.CacheStored(put.request_id, True))
    client, keeper = make(handler)
    outcome = Outcome()
    assert client.save(TOKENS, state, outcome)
    assert outcome.wait() is True
    assert blobs == [state]
    (put,) = keeper.of_kind(p.CachePut)
    assert isinstance(put, p.CachePut)
    assert (put.fingerprint, put.kv_type, put.tokens, put.raw_len) == (FINGERPRINT.hex(), "f16", TOKENS, len(state))
    chunks = [m for m in keeper.of_kind(p.CacheChunk) if isinstance(m, p.CacheChunk)]
    assert [len(c.data) for c in chunks] == [1 << 20, 1 << 20, len(state) - (2 << 20)]
    assert [c.last for c in chunks] == [False, False, True]


@pytest.mark.parametrize(("reason", "stored"), [("too_big", False), ("disk_full", False), ("busy", False)])
def test_refusals(make: Callable[..., tuple[CacheClient, FakeKeeper]], reason: str, stored: bool) -> None:
    handler, _ = collect_puts(lambda put, raw: p.CacheStored(put.request_id, False, reason))
    client, _ = make(handler)
    assert client.save_and_wait(TOKENS, b"s" * 1000) is stored
    assert client.available


@pytest.mark.parametrize("answer", [(True, "present"), (False, "present"), (False, "in_progress")])
def test_already_stored_is_success(
    make: Callable[..., tuple[CacheClient, FakeKeeper]], answer: tuple[bool, str]
) -> None:
    def refuse(message: p.Message) -> list[p.Message]:
        return [p.CacheStored(message.request_id, *answer)] if isinstance(message, p.CachePut) else []

    client, _ = make(refuse)
    assert client.save_and_wait(TOKENS, b"s" * 1000) is True


def test_refusal_before_the_chunks_ends_the_save(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    def refuse(message: p.Message) -> list[p.Message]:
        return [p.CacheStored(message.request_id, False, "too_big")] if isinstance(message, p.CachePut) else []

    client, _ = make(refuse)
    assert client.save_and_wait(TOKENS, bytes(5 << 20)) is False


def test_silent_keeper_fails_the_save_and_the_cache_is_skipped(
    make: Callable[..., tuple[CacheClient, FakeKeeper]]
) -> None:
    client, keeper = make(silent, timeout=SILENCE_S)
    outcome = Outcome()
    assert client.save(TOKENS, b"s" * 1000, outcome)
    assert outcome.wait() is False
    assert not client.available
    assert client.lookup(FINGERPRINT, blocks()) is None
    assert keeper.of_kind(p.CacheLookup) == []


def test_a_full_queue_drops_saves(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    client, _ = make(silent, pending=1, timeout=NEVER_S)
    outcomes = [Outcome() for _ in range(3)]
    queued = [client.save(TOKENS, b"s" * 100, outcome) for outcome in outcomes]
    assert queued[0] and not all(queued)
    client.close()  # gives up on the silent keeper at once; queued saves report failure
    for outcome, was_queued in zip(outcomes, queued, strict=True):
        if was_queued:
            assert outcome.wait() is False
        else:
            assert outcome.results == []


def test_close_does_not_wait_for_a_silent_keeper(make: Callable[..., tuple[CacheClient, FakeKeeper]]) -> None:
    client, keeper = make(silent, timeout=NEVER_S)
    assert client.save(TOKENS, b"s" * 100)
    keeper.wait_for(lambda: bool(keeper.of_kind(p.CacheChunk)))
    closing = threading.Thread(target=client.close, daemon=True)
    closing.start()
    closing.join(WAIT_S)  # far shorter than the keeper's timeout: only a close that waits for it fails
    assert not closing.is_alive()


# -- the header bytes of a hit -----------------------------------------------------------


def test_decode_header_round_trips() -> None:
    header, _ = entry_for(TOKENS, b"abc" * 100)
    assert decode_header(header.encode()) == header


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b[:10], "truncated fixed header"),
        (lambda b: b[:-1], "fixed header says"),
        (lambda b: b + b"\0", "fixed header says"),
        (lambda b: b"X" + b[1:], "magic"),
        (lambda b: b[:-5] + bytes([b[-5] ^ 1]) + b[-4:], "header checksum"),
    ],
)
def test_decode_header_refuses_damage(damage: Callable[[bytes], bytes], reason: str) -> None:
    header, _ = entry_for(TOKENS, b"abc" * 100)
    with pytest.raises(CorruptEntry, match=reason):
        decode_header(damage(header.encode()))
