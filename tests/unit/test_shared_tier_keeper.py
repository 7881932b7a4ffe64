"""Two cachekeepers sharing a tier, with a fake of the tier (no Redis) and real ZeroMQ sockets.

The real server is tests/integration/test_shared_tier.py's; here the fake stores what
the Redis layout would (cachekeeper.tier_rules) in a dict, and fails on demand.
"""

from __future__ import annotations

import functools
import random
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import zmq

from reame.cachekeeper import tier_rules as rules
from reame.cachekeeper.server import Keeper
from reame.cachekeeper.store import Store
from reame.cachekeeper.tier import PUSH_QUEUE, SharedTier
from reame.cachekeeper.tier_remote import Remote, RemoteError
from reame.shared import kv_entry
from reame.shared import protocol as p
from reame.shared.lifecycle import StopFlag
from reame.shared.prefix import block_hashes, entry_key
from tests.unit.entries import decode
from tests.waiting import PATIENCE_S, wait_for

FP = b"model-fingerprint"
BT = 4
PREFIX = "t:"
WAIT_MS = int(PATIENCE_S * 1000)  # parked lookups wait for the fetch, never for a clock


class FakeRemote:
    """The tier's layout in a dict; ``down`` makes every call fail as a dead server would."""

    def __init__(self) -> None:
        self.values: dict[str, bytes] = {}
        self.down = False
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def _call(self, what: str) -> None:
        with self.lock:
            self.calls.append(what)
        if self.down:
            raise RemoteError(f"{what}: connection refused")

    def count(self, what: str) -> int:
        with self.lock:
            return self.calls.count(what)

    def ping(self) -> None:
        self._call("ping")

    def index(self, fingerprint: bytes, blocks: Sequence[bytes], start: int) -> list[bytes | None]:
        self._call("index")
        return [self.values.get(name) for name in rules.block_names(PREFIX, fingerprint, blocks, start)]

    def entry(self, key: str) -> bytes | None:
        self._call("entry")
        return self.values.get(rules.entry_name(PREFIX, key))

    def push(self, key: str, fingerprint: bytes, blocks: Sequence[bytes], data: bytes) -> bool:
        self._call("push")
        name = rules.entry_name(PREFIX, key)
        sent = name not in self.values
        self.values[name] = data
        for block in rules.block_names(PREFIX, fingerprint, blocks):
            self.values[block] = key.encode()
        return sent

    def drop(self, key: str) -> None:
        self._call("drop")
        self.values.pop(rules.entry_name(PREFIX, key), None)

    def close(self) -> None:
        pass


class Host:
    """A cachekeeper with its own store directory and the shared tier, and a worker's DEALER."""

    def __init__(self, top: Path, name: str, remote: Remote, health: rules.Health | None = None) -> None:
        self.store = Store(top / name / "kv", 10**9, 0)
        self.tier = SharedTier(self.store, remote, "fake", min_gain=1, health=health)
        address = f"ipc://{top}/{name}/run/cache.ipc"
        self.keeper = Keeper(self.store, address, block_tokens=BT, level=1, shared=self.tier)
        self.keeper.bind()
        self.stop = StopFlag()
        self.thread = threading.Thread(target=self.keeper.run, args=(self.stop,), daemon=True)
        self.thread.start()
        self.context: zmq.Context[Any] = zmq.Context()
        self.worker: zmq.Socket[Any] = self.context.socket(zmq.DEALER)
        self.worker.setsockopt(zmq.LINGER, 0)
        self.worker.connect(address)

    def send(self, message: p.Message) -> None:
        self.worker.send(p.encode(message))

    def receive(self) -> p.Message:
        assert self.worker.poll(int(PATIENCE_S * 1000)), "no message arrived"
        return p.decode(self.worker.recv())

    def put(self, request_id: str, tokens: list[int], raw: bytes) -> p.Message:
        self.send(p.CachePut(request_id, FP.hex(), "f16", tokens, len(raw)))
        self.send(p.CacheChunk(request_id, raw, True))
        return self.receive()

    def lookup(self, request_id: str, tokens: list[int]) -> tuple[p.Message, bytes | bytearray | None]:
        """Return the first reply and, for a hit, the raw state its chunks decode to."""
        self.send(p.CacheLookup(request_id, FP.hex(), block_hashes(FP, tokens, BT), WAIT_MS))
        first = self.receive()
        if not isinstance(first, p.CacheHit):
            return first, None
        chunks: list[bytes] = []
        while True:
            chunk = self.receive()
            assert isinstance(chunk, p.CacheChunk), chunk
            chunks.append(chunk.data)
            if chunk.last:
                return first, decode(kv_entry.decode_header(first.header), chunks)

    def report(self) -> p.SharedTierReport:
        self.send(p.CacheAdmin("stats", p.CacheCommand.STATS))
        report = self.receive()
        assert isinstance(report, p.CacheReport) and report.shared is not None, report
        return report.shared

    def close(self) -> None:
        self.stop.set()
        self.thread.join(PATIENCE_S)
        self.keeper.close()
        self.worker.close()
        self.context.term()


@pytest.fixture
def top() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="reame-t"))  # ipc:// paths must stay short
    yield path
    shutil.rmtree(path)


@pytest.fixture
def remote() -> FakeRemote:
    return FakeRemote()


@pytest.fixture
def hosts(top: Path, remote: FakeRemote) -> Iterator[tuple[Host, Host]]:
    made = [Host(top, "a", remote), Host(top, "b", remote)]
    yield made[0], made[1]
    for host in made:
        host.close()


DOC = list(range(1000, 1040))  # 10 blocks
RAW = random.Random(7).randbytes(100_000)


def pushed(remote: FakeRemote, tokens: list[int]) -> bool:
    return rules.entry_name(PREFIX, entry_key(FP, tokens)) in remote.values


def test_an_entry_stored_on_one_host_is_restored_on_another(hosts: tuple[Host, Host], remote: FakeRemote) -> None:
    a, b = hosts
    assert isinstance(stored := a.put("put-1", DOC, RAW), p.CacheStored) and stored.stored
    wait_for(lambda: pushed(remote, DOC), what="the push to the tier")
    name = rules.entry_name(PREFIX, entry_key(FP, DOC))
    assert remote.values[name] == next(a.store.directory.glob("*.kv")).read_bytes()  # the file's bytes as they are
    hit, raw = b.lookup("look-1", [*DOC, 1, 2, 3, 4, 5])  # a question after the document
    assert isinstance(hit, p.CacheHit) and hit.key == entry_key(FP, DOC) and hit.matched_tokens == 40
    assert raw == RAW
    assert b.store.contains(entry_key(FP, DOC))  # now local: the next lookup needs no fetch
    report = b.report()
    assert (report.up, report.hits, report.misses, report.corrupt, report.errors) == (True, 1, 0, 0, 0)
    assert report.bytes_fetched == len(remote.values[name])
    assert a.report().pushes == 1 and b.report().pushes == 0  # a fetched entry is not pushed back
    probes = remote.count("index")
    hit, _ = b.lookup("look-2", DOC)
    assert isinstance(hit, p.CacheHit) and remote.count("index") == probes  # the store holds all of it


def test_the_deepest_entry_present_wins_and_a_dangling_index_key_is_a_miss_at_its_depth(
    hosts: tuple[Host, Host], remote: FakeRemote
) -> None:
    a, b = hosts
    longer = [*DOC, *range(2000, 2020)]  # 15 blocks
    # The shorter one last: the index keys of the document's blocks name it (the last pushed wins).
    for request_id, tokens in (("long", longer), ("short", DOC)):
        assert isinstance(stored := a.put(request_id, tokens, RAW), p.CacheStored) and stored.stored
        wait_for(functools.partial(pushed, remote, tokens), what="the push to the tier")
    del remote.values[rules.entry_name(PREFIX, entry_key(FP, longer))]  # evicted by Redis, its index keys not
    hit, raw = b.lookup("look", [*longer, 9, 9, 9, 9])
    assert isinstance(hit, p.CacheHit) and hit.key == entry_key(FP, DOC) and raw == RAW
    hit, _ = b.lookup("other", [5, 5, 5, 5, 5, 5, 5, 5])
    assert isinstance(hit, p.CacheMiss)
    assert (b.report().hits, b.report().misses) == (1, 1)


def test_a_corrupt_entry_in_the_tier_is_refused_deleted_there_and_never_served(
    hosts: tuple[Host, Host], remote: FakeRemote
) -> None:
    a, b = hosts
    assert isinstance(a.put("put", DOC, RAW), p.CacheStored)
    wait_for(lambda: pushed(remote, DOC), what="the push to the tier")
    name = rules.entry_name(PREFIX, entry_key(FP, DOC))
    data = remote.values[name]
    remote.values[name] = data[:-100] + bytes([data[-100] ^ 0x01]) + data[-99:]  # one payload bit
    miss, _ = b.lookup("look", [*DOC, 1, 2, 3, 4])
    assert isinstance(miss, p.CacheMiss)
    assert not b.store.contains(entry_key(FP, DOC)) and not list(b.store.directory.glob("*.kv"))
    assert name not in remote.values
    report = b.report()
    assert (report.corrupt, report.hits, report.misses) == (1, 0, 1)


def test_a_down_tier_costs_one_failed_request_then_lookups_skip_it_until_it_is_back(
    top: Path, remote: FakeRemote
) -> None:
    host = Host(top, "a", remote, rules.Health(first_s=0.05, max_s=0.05))
    try:
        wait_for(lambda: remote.count("ping") >= 1, what="the tier's first ping")
        assert isinstance(host.put("put", DOC, RAW), p.CacheStored)
        wait_for(lambda: pushed(remote, DOC), what="the push to the tier")
        remote.down = True
        for i in range(5):
            hit, raw = host.lookup(f"look-{i}", [*DOC, 1, 2, 3, 4, i])
            assert isinstance(hit, p.CacheHit) and raw == RAW  # the local store still answers
        assert remote.count("index") == 1  # only the first lookup asked the tier
        report = host.report()
        assert not report.up and report.errors == 1
        assert isinstance(host.put("put-2", [*DOC, *range(50, 70)], RAW), p.CacheStored)
        wait_for(lambda: host.report().push_drops == 1, what="the push dropped while the tier is down")
        assert remote.count("push") == 1
        remote.down = False
        wait_for(lambda: host.report().up, what="the retry to find the tier back")
        assert host.report().errors == 1  # the retries while it was down are no request's cost
        miss, _ = host.lookup("after", [7, 7, 7, 7, 7, 7, 7, 7])
        assert isinstance(miss, p.CacheMiss) and remote.count("index") == 2
    finally:
        host.close()


def test_pushes_beyond_the_queue_are_dropped_and_counted(top: Path, remote: FakeRemote) -> None:
    store = Store(top / "kv", 10**9, 0)
    tier = SharedTier(store, remote, "fake", min_gain=1)  # not started: nothing takes from the queue
    try:
        for i in range(PUSH_QUEUE + 3):
            tier.push(f"{i:032x}")
        assert tier.report().push_drops == 3
    finally:
        assert tier.stop(PATIENCE_S)
        store.close()


def test_a_lookup_not_worth_a_transfer_does_not_ask_the_tier(top: Path, remote: FakeRemote) -> None:
    store = Store(top / "kv", 10**9, 0)
    tier = SharedTier(store, remote, "fake", min_gain=4)
    try:
        blocks = block_hashes(FP, DOC, BT)
        assert tier.fetch(FP, blocks, local_depth=7) is None  # 3 blocks more at most: under min_tokens
        assert tier.fetch(FP, blocks, local_depth=6) is not None
    finally:
        assert tier.stop(PATIENCE_S)
        store.close()
