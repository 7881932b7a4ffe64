"""The cachekeeper's loop with real ZeroMQ sockets on ipc:// and a fake worker."""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from reame.cachekeeper import entry
from reame.cachekeeper.server import Keeper
from reame.cachekeeper.store import PendingPut, Store
from reame.shared import kv_entry
from reame.shared import protocol as p
from reame.shared.lifecycle import StopFlag
from reame.shared.prefix import block_hashes, entry_key
from tests.unit.entries import decode
from tests.waiting import PATIENCE_S, wait_for

FP = b"model-fingerprint"
BT = 4
TIMEOUT_S = PATIENCE_S  # an upper bound for a busy machine: only a failure waits it out
MIB = 1 << 20


@pytest.fixture
def run_dir() -> Iterator[Path]:
    # ipc:// paths are limited to about 100 bytes: keep them short.
    top = Path(tempfile.mkdtemp(prefix="reame-t"))
    yield top / "run"
    shutil.rmtree(top)


class Running:
    """A Keeper looping in a thread, and a DEALER connected to it as a worker's."""

    def __init__(
        self, store_dir: Path, run_dir: Path, max_bytes: int = 10**9, *,
        store: Store | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store_dir = store_dir
        self.address = f"ipc://{run_dir}/cache.ipc"
        store = store or Store(store_dir, max_bytes, 0)
        self.keeper = Keeper(store, self.address, block_tokens=BT, level=1, clock=clock)
        self.keeper.bind()
        self.stop = StopFlag()
        self.thread = threading.Thread(target=self.keeper.run, args=(self.stop,), daemon=True)
        self.thread.start()
        self.context: zmq.Context[Any] = zmq.Context()
        self.sockets: list[zmq.Socket[Any]] = []
        self.worker = self.dealer(b"worker-0")

    def dealer(self, identity: bytes) -> zmq.Socket[Any]:
        sock: zmq.Socket[Any] = self.context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, identity)
        sock.connect(self.address)
        self.sockets.append(sock)
        return sock

    def send(self, message: p.Message, sock: zmq.Socket[Any] | None = None) -> None:
        (sock or self.worker).send(p.encode(message))

    def receive(self, sock: zmq.Socket[Any] | None = None) -> p.Message:
        sock = sock or self.worker
        assert sock.poll(int(TIMEOUT_S * 1000)), "no message arrived"
        return p.decode(sock.recv())

    def put(self, request_id: str, tokens: list[int], raw: bytes, sock: zmq.Socket[Any] | None = None) -> p.Message:
        self.send(p.CachePut(request_id, FP.hex(), "f16", tokens, len(raw)), sock)
        for start in range(0, len(raw), MIB):
            self.send(p.CacheChunk(request_id, raw[start : start + MIB], start + MIB >= len(raw)), sock)
        return self.receive(sock)

    def lookup(self, request_id: str, tokens: list[int]) -> p.Message:
        self.send(p.CacheLookup(request_id, FP.hex(), block_hashes(FP, tokens, BT)))
        return self.receive()

    def synced(self, sock: zmq.Socket[Any]) -> None:
        """Return once the keeper has handled what ``sock`` sent: it handles each peer's messages in order."""
        self.send(p.CacheAdmin("sync", p.CacheCommand.STATS), sock)
        assert isinstance(self.receive(sock), p.CacheReport)

    def lookup_waiting(self, request_id: str, tokens: list[int], wait_ms: int = 500) -> None:
        """Send a lookup willing to wait for a put under way, and wait until the keeper parks it."""
        waits = self.keeper.counters.lookup_waits
        self.send(p.CacheLookup(request_id, FP.hex(), block_hashes(FP, tokens, BT), wait_ms))
        wait_for(lambda: self.keeper.counters.lookup_waits > waits, TIMEOUT_S, what="the lookup to be parked")

    def chunks(self, request_id: str) -> tuple[list[bytes], p.Message | None]:
        """Collect the chunks of a transfer; return them and the CacheMiss that aborted it, if any."""
        data: list[bytes] = []
        while True:
            message = self.receive()
            if isinstance(message, p.CacheMiss):
                return data, message
            assert isinstance(message, p.CacheChunk) and message.request_id == request_id, message
            data.append(message.data)
            if message.last:
                return data, None

    def admin(self, command: p.CacheCommand) -> p.CacheReport:
        self.send(p.CacheAdmin(f"admin-{command}", command))
        report = self.receive()
        assert isinstance(report, p.CacheReport) and report.request_id == f"admin-{command}", report
        return report

    def close(self) -> None:
        self.stop.set()
        self.thread.join(TIMEOUT_S)
        self.keeper.close()
        for sock in self.sockets:
            sock.close()
        self.context.term()


@pytest.fixture
def running(tmp_path: Path, run_dir: Path) -> Iterator[Running]:
    r = Running(tmp_path / "kv", run_dir)
    yield r
    r.close()


def raw_state(size: int, seed: int = 1) -> bytes:
    # Half random, half zeros: compressible like a real state, but not trivially.
    rng = random.Random(seed)
    return b"".join(rng.randbytes(4096) + bytes(4096) for _ in range(size // 8192))


def decode_hit(hit: p.CacheHit, chunks: list[bytes], where: Path) -> tuple[kv_entry.EntryHeader, bytes]:
    """Parse the header bytes the way a worker does (through an entry file here) and decode the payload."""
    path = where / "received.kv"
    path.write_bytes(hit.header + b"".join(chunks))
    header = entry.check_entry(path)
    return header, bytes(decode(header, chunks))


def test_a_stored_state_is_found_by_a_longer_prompt(running: Running, tmp_path: Path) -> None:
    tokens = list(range(100, 110))  # two full blocks of four, and two tokens more
    raw = raw_state(3 * MIB)
    assert running.put("p1", tokens, raw) == p.CacheStored("p1", True, "")
    assert len(list(running.store_dir.glob("*.kv"))) == 1

    hit = running.lookup("l1", [*tokens[:9], 7, 7, 7, 7, 7])
    assert isinstance(hit, p.CacheHit), hit
    assert hit.key == entry_key(FP, tokens) and hit.matched_tokens == 8
    chunks, aborted = running.chunks("l1")
    assert aborted is None and len(chunks) >= 1 and all(len(c) <= MIB for c in chunks)
    header, decoded = decode_hit(hit, chunks, tmp_path)
    assert header.tokens == tuple(tokens) and header.kv_type == "f16" and header.block_tokens == BT
    assert decoded == raw

    assert running.lookup("l2", [9] * 16) == p.CacheMiss("l2")
    assert running.lookup("l3", tokens[:3]) == p.CacheMiss("l3")  # not even one full block

    report = running.admin(p.CacheCommand.STATS)
    assert (report.entries, report.hits, report.misses) == (1, 1, 2)
    assert report.bytes_read == header.payload_len
    assert report.bytes_written == report.bytes == header.file_size
    assert report.save_seconds > 0 and report.restore_seconds > 0  # for /metrics; how long is not tested


def test_the_same_prefix_is_stored_once(running: Running) -> None:
    tokens = list(range(12))
    assert running.put("p1", tokens, raw_state(MIB)) == p.CacheStored("p1", True, "")
    assert running.put("p2", tokens, raw_state(MIB, seed=2)) == p.CacheStored("p2", True, "present")
    assert running.admin(p.CacheCommand.STATS).entries == 1
    assert len(list(running.store_dir.glob("*.kv"))) == 1


def test_two_workers_putting_the_same_prefix_at_once_store_it_once(running: Running) -> None:
    tokens, raw = list(range(12)), raw_state(2 * MIB)
    other = running.dealer(b"worker-1")
    for request_id, sock in (("a", running.worker), ("b", other)):
        running.send(p.CachePut(request_id, FP.hex(), "f16", tokens, len(raw)), sock)
    for request_id, sock in (("a", running.worker), ("b", other)):
        running.send(p.CacheChunk(request_id, raw, True), sock)
    answers = [running.receive(running.worker), running.receive(other)]
    # Which put the cachekeeper finishes first depends on which socket it reads first.
    assert all(isinstance(a, p.CacheStored) and a.stored for a in answers), answers
    assert sorted(a.reason for a in answers if isinstance(a, p.CacheStored)) == ["", "present"]
    assert running.admin(p.CacheCommand.STATS).entries == 1


def test_a_corrupt_entry_aborts_the_transfer_and_is_deleted(running: Running) -> None:
    tokens = list(range(8))
    running.put("p1", tokens, raw_state(3 * MIB))
    (path,) = running.store_dir.glob("*.kv")
    damaged = bytearray(path.read_bytes())
    damaged[-1000] ^= 0x10
    path.write_bytes(damaged)

    hit = running.lookup("l1", tokens)
    assert isinstance(hit, p.CacheHit)
    _, aborted = running.chunks("l1")
    assert aborted == p.CacheMiss("l1")
    assert not path.exists()
    report = running.admin(p.CacheCommand.STATS)
    assert (report.entries, report.corrupt) == (0, 1)
    assert running.lookup("l2", tokens) == p.CacheMiss("l2")


def test_a_worker_reporting_a_corrupt_entry_gets_it_deleted(running: Running) -> None:
    tokens = list(range(8))
    running.put("p1", tokens, raw_state(MIB))
    running.send(p.CacheCorrupt("not-a-key", "whatever"))
    running.send(p.CacheCorrupt(entry_key(FP, tokens), "restore failed"))
    report = running.admin(p.CacheCommand.STATS)
    assert (report.entries, report.corrupt) == (0, 1)


def test_verify_and_purge(running: Running) -> None:
    good, bad = list(range(8)), list(range(50, 58))
    running.put("p1", good, raw_state(MIB))
    running.put("p2", bad, raw_state(MIB, seed=3))
    path = running.store_dir / f"{entry_key(FP, bad)}.kv"
    damaged = bytearray(path.read_bytes())
    damaged[-5] ^= 0x01
    path.write_bytes(damaged)

    report = running.admin(p.CacheCommand.VERIFY)
    assert report.removed == [entry_key(FP, bad)] and report.entries == 1 and report.corrupt == 1
    assert running.admin(p.CacheCommand.VERIFY).removed == []

    report = running.admin(p.CacheCommand.PURGE)
    assert report.removed == [entry_key(FP, good)] and report.entries == 0 and report.bytes == 0
    assert list(running.store_dir.glob("*.kv")) == []


def test_bad_requests_are_answered_or_dropped_and_the_loop_goes_on(running: Running) -> None:
    running.worker.send(b"\x00not msgpack")
    running.worker.send_multipart([b"two", b"frames"])
    running.send(p.Heartbeat())
    running.send(p.CacheLookup("l1", "not hex", []))
    assert running.receive() == p.CacheMiss("l1")
    running.send(p.CacheLookup("l2", FP.hex(), [b"short"]))
    assert running.receive() == p.CacheMiss("l2")
    running.send(p.CacheLookup("l3", "", [b"x" * 16]))
    assert running.receive() == p.CacheMiss("l3")

    assert running.put("p1", [1, 2**40], b"x") == p.CacheStored("p1", False, "invalid")
    running.send(p.CachePut("p2", FP.hex(), "f16", [1] * 8, 4))
    running.send(p.CacheChunk("p2", b"abc", True))
    assert running.receive() == p.CacheStored("p2", False, "bad_length")
    # Chunks of no put are dropped without an answer: the next answer is the stats'.
    running.send(p.CacheChunk("nobody", b"abc", True))
    assert running.admin(p.CacheCommand.STATS).entries == 0


def test_a_state_bigger_than_the_cache_is_refused(tmp_path: Path, run_dir: Path) -> None:
    r = Running(tmp_path / "kv", run_dir, max_bytes=MIB)
    try:
        raw = raw_state(2 * MIB)
        r.send(p.CachePut("big", FP.hex(), "f16", list(range(8)), len(raw)))
        assert r.receive() == p.CacheStored("big", False, "too_big")
        # Under the cap: stored, and the next one evicts the least recently used.
        rng = random.Random(5)
        assert r.put("p1", list(range(8)), rng.randbytes(600_000)) == p.CacheStored("p1", True, "")
        assert r.put("p2", list(range(9, 17)), rng.randbytes(600_000)) == p.CacheStored("p2", True, "")
        report = r.admin(p.CacheCommand.STATS)
        assert (report.entries, report.evictions) == (1, 1) and report.bytes <= MIB
    finally:
        r.close()


def test_a_new_lookup_from_a_worker_ends_its_unfinished_transfer(running: Running) -> None:
    tokens = list(range(8))
    running.put("p1", tokens, raw_state(8 * MIB))
    assert isinstance(running.lookup("l1", tokens), p.CacheHit)
    running.send(p.CacheLookup("l2", FP.hex(), block_hashes(FP, tokens, BT)))
    # Whatever of l1 was already sent comes first; then l2 from its start to its end.
    seen: list[tuple[str, bool]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while not seen or seen[-1] != ("l2", True):
        assert time.monotonic() < deadline
        message = running.receive()
        if isinstance(message, p.CacheChunk):
            seen.append((message.request_id, message.last))
        else:
            assert isinstance(message, p.CacheHit) and message.request_id == "l2"
            seen.append(("hit", False))
    assert ("l1", True) not in seen or seen.index(("l1", True)) < seen.index(("hit", False))
    assert all(rid == "l2" for rid, _ in seen[seen.index(("hit", False)) + 1 :])


# -- lookups waiting for a put under way --------------------------------------------


class GatedStore(Store):
    """A store whose commits wait for the test, so a put stays "being written" for as long as it likes."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory, 10**9, 0)
        self.writing = threading.Event()
        self.gate = threading.Event()

    def commit(self, put: PendingPut) -> None:
        self.writing.set()
        assert self.gate.wait(TIMEOUT_S), "the test never let the commit go on"
        super().commit(put)


class FrozenClock:
    """The keeper's clock: lookups run out of patience only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def frozen() -> FrozenClock:
    return FrozenClock()


@pytest.fixture
def gated(tmp_path: Path, run_dir: Path, frozen: FrozenClock) -> Iterator[tuple[Running, GatedStore]]:
    store = GatedStore(tmp_path / "kv")
    r = Running(tmp_path / "kv", run_dir, store=store, clock=frozen)
    yield r, store
    store.gate.set()
    r.close()


DOC = list(range(200, 212))  # three blocks of four


def test_a_lookup_waits_for_a_put_being_written_and_gets_its_entry(
    gated: tuple[Running, GatedStore], tmp_path: Path,
) -> None:
    running, store = gated
    uploader = running.dealer(b"uploader-0")
    raw = raw_state(2 * MIB)
    running.send(p.CachePut("p1", FP.hex(), "f16", DOC, len(raw)), uploader)
    running.send(p.CacheChunk("p1", raw, True), uploader)
    assert store.writing.wait(TIMEOUT_S)

    # While the put is being written: another prefix, or a client that will not wait, is answered at once.
    running.send(p.CacheLookup("other", FP.hex(), block_hashes(FP, [9] * 12, BT), 500))
    assert running.receive() == p.CacheMiss("other")
    running.send(p.CacheLookup("now", FP.hex(), block_hashes(FP, DOC, BT), 0))
    assert running.receive() == p.CacheMiss("now")

    running.lookup_waiting("l1", [*DOC, 1, 2, 3])
    store.gate.set()
    assert running.receive(uploader) == p.CacheStored("p1", True, "")
    hit = running.receive()
    assert isinstance(hit, p.CacheHit) and hit.request_id == "l1", hit
    assert hit.key == entry_key(FP, DOC) and hit.matched_tokens == 12
    chunks, aborted = running.chunks("l1")
    assert aborted is None and decode_hit(hit, chunks, tmp_path)[1] == raw

    report = running.admin(p.CacheCommand.STATS)
    # The peek that decided to wait is not counted: one lookup, one answer.
    assert (report.hits, report.misses, report.lookup_waits) == (1, 2, 1)


def test_a_failed_put_releases_the_waiting_lookup_with_a_miss(gated: tuple[Running, GatedStore]) -> None:
    running, _ = gated
    uploader = running.dealer(b"uploader-0")
    running.send(p.CachePut("p1", FP.hex(), "f16", DOC, 2 * MIB), uploader)
    running.send(p.CacheChunk("p1", bytes(MIB), False), uploader)  # still being received
    running.synced(uploader)  # else the lookup, from another socket, may be read before the put
    running.lookup_waiting("l1", DOC)
    running.send(p.CacheChunk("p1", bytes(10), True), uploader)  # does not add up: the put fails
    assert running.receive(uploader) == p.CacheStored("p1", False, "bad_length")
    assert running.receive() == p.CacheMiss("l1")


def test_a_lookup_whose_patience_runs_out_gets_what_the_store_has(
    gated: tuple[Running, GatedStore], frozen: FrozenClock,
) -> None:
    running, store = gated
    store.gate.set()
    assert running.put("shallow", DOC[:4], raw_state(MIB)) == p.CacheStored("shallow", True, "")
    uploader = running.dealer(b"uploader-0")
    running.send(p.CachePut("p1", FP.hex(), "f16", DOC, 2 * MIB), uploader)
    running.send(p.CacheChunk("p1", bytes(MIB), False), uploader)
    running.synced(uploader)
    # The store shares one block, the put three: worth waiting for, until the patience ends.
    running.lookup_waiting("l1", DOC, wait_ms=400)
    frozen.now += 0.4
    hit = running.receive()
    assert isinstance(hit, p.CacheHit) and hit.request_id == "l1", hit
    assert hit.key == entry_key(FP, DOC[:4]) and hit.matched_tokens == 4
    _, aborted = running.chunks("l1")
    assert aborted is None
    # The put itself goes on and is stored.
    running.send(p.CacheChunk("p1", bytes(MIB), True), uploader)
    assert running.receive(uploader) == p.CacheStored("p1", True, "")
