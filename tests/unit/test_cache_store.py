"""The store: longest-prefix lookups, admission, LRU eviction, and repair after crashes."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reame.cachekeeper.index import index_files
from reame.cachekeeper.store import INDEX_NAME, PendingPut, Refusal, Store, StoreLocked
from reame.shared.kv_entry import CorruptEntry, EntryHeader, encode_payload
from reame.shared.prefix import block_hashes
from reame.worker.kv import common_prefix
from tests.unit.entries import decode, write_file

FP = b"model"
BT = 4
RAW_BYTES = 3000
ROOT = Path(__file__).resolve().parents[2]


def entry_for(tokens: list[int], raw_bytes: int = RAW_BYTES) -> tuple[EntryHeader, bytes, bytes]:
    raw = random.Random(sum(tokens)).randbytes(raw_bytes)  # incompressible: sizes stay predictable
    payload = encode_payload(raw)
    return EntryHeader.build(FP, "f16", tokens, BT, payload, created=1.0), payload.data, raw


def put(store: Store, tokens: list[int], raw_bytes: int = RAW_BYTES) -> EntryHeader:
    header, data, _ = entry_for(tokens, raw_bytes)
    pending = store.begin_put(header)
    assert isinstance(pending, PendingPut), pending
    pending.write(data[:1000])
    pending.write(data[1000:])
    store.commit(pending)
    return header


def lookup_key(store: Store, tokens: Sequence[int]) -> str | None:
    match = store.lookup(FP, block_hashes(FP, tokens, BT))
    return None if match is None else match.key


def size_of(tokens: list[int]) -> int:
    return entry_for(tokens)[0].file_size


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path, max_bytes=10**9, min_free_bytes=0) as s:
        yield s


def test_round_trip_through_the_store(store: Store) -> None:
    header, _, raw = entry_for([1, 2, 3, 4, 5])
    put(store, [1, 2, 3, 4, 5])
    assert store.contains(header.key())
    handle = store.open_read(header.key())
    assert handle is not None
    with handle:
        assert handle.header == header
        assert decode(handle.header, handle.chunks(500)) == raw
    assert store.open_read("0" * 32) is None


def test_the_longest_of_several_prefixes_wins(store: Store) -> None:
    doc = list(range(100, 120))
    short, middle, long = put(store, doc[:4]), put(store, doc[:12]), put(store, doc[:8])
    match = store.lookup(FP, block_hashes(FP, [*doc, 7, 7, 7, 7], BT))
    assert match is not None
    assert (match.key, match.depth, match.matched_tokens, match.n_tokens) == (middle.key(), 3, 12, 12)
    assert lookup_key(store, doc[:9]) in {middle.key(), long.key()}
    assert lookup_key(store, doc[:5]) is not None and lookup_key(store, [1, 2, 3, 4]) is None
    assert lookup_key(store, doc[:3]) is None  # no full block, nothing to match
    assert short.key() != middle.key()
    assert store.lookup(b"other model", block_hashes(FP, doc, BT)) is None


def test_ties_go_to_the_most_recently_used(store: Store) -> None:
    doc = list(range(200, 208))
    a, b = put(store, [*doc, 1, 1, 1, 1]), put(store, [*doc, 2, 2, 2, 2])
    assert lookup_key(store, a.tokens) == a.key()  # touches a
    assert lookup_key(store, [*doc, 3, 3, 3, 3]) == a.key()
    assert lookup_key(store, b.tokens) == b.key()  # touches b
    assert lookup_key(store, [*doc, 3, 3, 3, 3]) == b.key()


def test_entries_sharing_a_document_are_all_found_by_it(store: Store) -> None:
    doc = list(range(300, 310))  # two full blocks and a partial one
    a, b = put(store, [*doc, 41, 42, 43]), put(store, [*doc, 51, 52, 53])
    for owner in (a, b):
        assert lookup_key(store, list(owner.tokens)) == owner.key()
        match = store.lookup(FP, block_hashes(FP, [*doc, 61, 62, 63], BT))
        assert match is not None and match.key == owner.key()
        assert match.matched_tokens == len(doc) // BT * BT == 8
    assert store.stats().hits == 4 and store.stats().misses == 0


def test_lru_eviction_keeps_the_cap_and_touching_protects(tmp_path: Path) -> None:
    a, b, c, d = ([i] * 8 for i in range(1, 5))
    cap = 3 * size_of(a) + size_of(a) // 2
    with Store(tmp_path, max_bytes=cap, min_free_bytes=0) as store:
        keys = [put(store, tokens).key() for tokens in (a, b, c)]
        assert lookup_key(store, a) == keys[0]  # a is now the most recent; b the least
        d_key = put(store, d).key()
        assert [store.contains(k) for k in keys] == [True, False, True]
        assert store.contains(d_key)
        stats = store.stats()
        assert stats.entries == 3 and stats.bytes <= cap and stats.evictions == 1
        assert not (tmp_path / f"{keys[1]}.kv").exists()


def test_an_entry_being_read_is_not_evicted(tmp_path: Path) -> None:
    a, b = [1] * 8, [2] * 8
    with Store(tmp_path, max_bytes=size_of(a) + size_of(a) // 2, min_free_bytes=0) as store:
        key_a = put(store, a).key()
        handle = store.open_read(key_a)
        assert handle is not None
        header_b = entry_for(b)[0]
        assert store.begin_put(header_b) is Refusal.NO_ROOM
        assert store.contains(key_a)
        handle.close()
        put(store, b)
        assert not store.contains(key_a) and store.contains(header_b.key())


def test_an_entry_bigger_than_the_cap_is_refused(tmp_path: Path) -> None:
    header = entry_for([1] * 8)[0]
    with Store(tmp_path, max_bytes=header.file_size - 1, min_free_bytes=0) as store:
        assert store.begin_put(header) is Refusal.TOO_BIG
        assert store.stats().refusals == 1 and list(tmp_path.glob("*.kv")) == []


def test_a_put_that_would_leave_too_little_free_disk_is_refused(tmp_path: Path) -> None:
    header = entry_for([1] * 8)[0]
    free = 10 * header.file_size
    with Store(tmp_path, 10**9, min_free_bytes=free - header.file_size + 1, free_bytes=lambda _: free) as store:
        assert store.begin_put(header) is Refusal.DISK_FULL
    with Store(tmp_path, 10**9, min_free_bytes=free - header.file_size, free_bytes=lambda _: free) as store:
        assert isinstance(store.begin_put(header), PendingPut)


def test_the_same_key_is_stored_once(store: Store) -> None:
    header, data, _ = entry_for([9] * 8)
    first = store.begin_put(header)
    assert isinstance(first, PendingPut)
    assert store.begin_put(header) is Refusal.IN_PROGRESS
    first.write(data)
    store.commit(first)
    assert store.begin_put(header) is Refusal.PRESENT
    assert store.stats().entries == 1 and store.stats().puts == 1 and store.stats().refusals == 2


def test_an_aborted_or_bad_put_leaves_nothing(store: Store, tmp_path: Path) -> None:
    header, data, _ = entry_for([9] * 8)
    pending = store.begin_put(header)
    assert isinstance(pending, PendingPut)
    pending.write(data[:10])
    store.abort(pending)
    bad = store.begin_put(header)  # the reservation is gone, so it may start again
    assert isinstance(bad, PendingPut)
    bad.write(data[:-1])
    with pytest.raises(CorruptEntry):
        store.commit(bad)
    assert not store.contains(header.key())
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith((".kv", ".tmp"))] == []
    assert isinstance(store.begin_put(header), PendingPut)


def test_entries_survive_closing_and_reopening(tmp_path: Path) -> None:
    with Store(tmp_path, 10**9, 0) as store:
        key = put(store, list(range(12))).key()
    with Store(tmp_path, 10**9, 0) as store:
        assert store.contains(key) and lookup_key(store, list(range(12))) == key
        assert store.stats().entries == 1


@pytest.mark.parametrize("damage", ["delete", "garbage"])
def test_the_index_is_rebuilt_from_the_entry_files(tmp_path: Path, damage: str) -> None:
    with Store(tmp_path, 10**9, 0) as store:
        keys = {put(store, [i] * 9).key() for i in range(3)}
    for path in index_files(tmp_path / INDEX_NAME):
        path.unlink(missing_ok=True)
    if damage == "garbage":
        (tmp_path / INDEX_NAME).write_bytes(b"this is not a database" * 100)
    with Store(tmp_path, 10**9, 0) as store:
        assert all(store.contains(k) for k in keys) and store.stats().entries == 3
        assert lookup_key(store, [1] * 12) == entry_for([1] * 9)[0].key()


def test_rows_without_files_and_files_without_rows_are_reconciled(tmp_path: Path) -> None:
    with Store(tmp_path, 10**9, 0) as store:
        gone = put(store, [1] * 8).key()
    (tmp_path / f"{gone}.kv").unlink()
    header, data, _ = entry_for([2] * 8)  # committed, but its writer died before the index row
    write_file(tmp_path / f"{header.key()}.kv", header, data)
    damaged, damaged_data, _ = entry_for([3] * 8)  # left without a row, and then its header rotted
    damaged_path = tmp_path / f"{damaged.key()}.kv"
    write_file(damaged_path, damaged, damaged_data)
    rotten = bytearray(damaged_path.read_bytes())
    rotten[40] ^= 0x04
    damaged_path.write_bytes(rotten)
    with Store(tmp_path, 10**9, 0) as store:
        assert not store.contains(gone) and store.contains(header.key()) and not store.contains(damaged.key())
        assert lookup_key(store, [2] * 8) == header.key()
        stats = store.stats()
        assert (stats.entries, stats.corrupt) == (1, 1)
        assert not damaged_path.exists()


def test_misnamed_and_resized_files_are_caught_at_open(tmp_path: Path) -> None:
    with Store(tmp_path, 10**9, 0) as store:
        renamed, resized = put(store, [1] * 8).key(), put(store, [2] * 8).key()
    (tmp_path / f"{renamed}.kv").rename(tmp_path / f"{'f' * 32}.kv")
    with (tmp_path / f"{resized}.kv").open("ab") as file:
        file.write(b"more")
    with Store(tmp_path, 10**9, 0) as store:
        assert store.stats().entries == 0 and store.stats().corrupt == 2
    assert list(tmp_path.glob("*.kv")) == []


def test_a_smaller_cap_at_open_evicts_the_least_recent(tmp_path: Path) -> None:
    with Store(tmp_path, 10**9, 0) as store:
        keys = [put(store, [i] * 8).key() for i in range(3)]
        lookup_key(store, [0] * 8)
    with Store(tmp_path, 2 * size_of([0] * 8), 0) as store:
        assert [store.contains(k) for k in keys] == [True, False, True]


def test_lookups_find_the_deepest_of_thousands_of_blocks(tmp_path: Path) -> None:
    tokens = list(range(2000))
    payload = encode_payload(b"state")
    with Store(tmp_path, 10**9, 0) as store:
        for length in (5, 1500):
            header = EntryHeader.build(FP, "f16", tokens[:length], 1, payload, created=1.0)
            pending = store.begin_put(header)
            assert isinstance(pending, PendingPut)
            pending.write(payload.data)
            store.commit(pending)
        deep = store.lookup(FP, block_hashes(FP, tokens, 1))
        shallow = store.lookup(FP, block_hashes(FP, tokens[:5] + [-1] * 1995, 1))
        assert deep is not None and deep.matched_tokens == 1500
        assert shallow is not None and shallow.matched_tokens == 5


def test_a_writer_killed_before_commit_leaves_nothing(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path)], cwd=ROOT,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "half written\n"
        assert list(tmp_path.glob(".*.tmp")), "the child should be mid-write"
        with pytest.raises(StoreLocked):
            Store(tmp_path, 10**9, 0)
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    with Store(tmp_path, 10**9, 0) as store:
        assert store.stats().entries == 0 and lookup_key(store, list(range(64))) is None
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith((".kv", ".tmp"))] == []
    db = sqlite3.connect(tmp_path / INDEX_NAME)
    try:
        assert db.execute("SELECT COUNT(*) FROM entries").fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM blocks").fetchone() == (0,)
    finally:
        db.close()


KILLED_WRITER = """
import random, sys
from pathlib import Path
from reame.shared.kv_entry import EntryHeader, encode_payload
from reame.cachekeeper.store import Store
store = Store(Path(sys.argv[1]), max_bytes=10**9, min_free_bytes=0)
payload = encode_payload(random.Random(0).randbytes(4_000_000))
header = EntryHeader.build(b"model", "f16", list(range(64)), 4, payload, created=1.0)
pending = store.begin_put(header)
pending.write(payload.data[: len(payload.data) // 2])
print("half written", flush=True)
sys.stdin.read()
"""


def test_a_corrupt_entry_found_while_reading_is_deleted_and_counted(store: Store, tmp_path: Path) -> None:
    key = put(store, [5] * 8).key()
    path = tmp_path / f"{key}.kv"
    damaged = bytearray(path.read_bytes())
    damaged[-10] ^= 0x40
    path.write_bytes(damaged)
    handle = store.open_read(key)
    assert handle is not None
    with handle, pytest.raises(CorruptEntry, match="checksum"):
        list(handle.chunks())
    assert not store.contains(key) and not path.exists() and store.stats().corrupt == 1


def test_an_entry_swapped_with_another_ones_file_is_deleted_at_open(store: Store, tmp_path: Path) -> None:
    first, second = put(store, [5] * 8).key(), put(store, [6] * 8).key()
    a, b = tmp_path / f"{first}.kv", tmp_path / f"{second}.kv"
    data = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(data)
    assert store.open_read(first) is None and store.open_read(second) is None
    assert not store.contains(first) and not store.contains(second) and store.stats().corrupt == 2


def test_verify_deletes_and_reports_only_the_bad_entries(store: Store, tmp_path: Path) -> None:
    good, bad = put(store, [1] * 8).key(), put(store, [2] * 8).key()
    path = tmp_path / f"{bad}.kv"
    damaged = bytearray(path.read_bytes())
    damaged[30] ^= 0x01  # inside the header this time
    path.write_bytes(damaged)
    report = store.verify()
    assert [c.key for c in report] == [bad] and "checksum" in report[0].reason
    assert store.contains(good) and not store.contains(bad) and store.stats().corrupt == 1


def test_purge_deletes_everything(store: Store, tmp_path: Path) -> None:
    for i in range(3):
        put(store, [i] * 8)
    assert store.purge() == 3
    assert store.stats().entries == 0 and store.stats().bytes == 0 and list(tmp_path.glob("*.kv")) == []


def test_a_directory_has_one_owner(store: Store, tmp_path: Path) -> None:
    with pytest.raises(StoreLocked):
        Store(tmp_path, 10**9, 0)


def test_bad_limits_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        Store(tmp_path, 0, 0)


@settings(max_examples=30, deadline=None)
@given(
    stored=st.lists(st.lists(st.integers(0, 3), max_size=14), min_size=1, max_size=5),
    query=st.lists(st.integers(0, 3), max_size=14),
)
def test_lookup_agrees_with_a_brute_force_longest_prefix(stored: list[list[int]], query: list[int]) -> None:
    shared = {entry_for(tokens)[0].key(): common_prefix(tokens, query) // BT for tokens in stored}
    with tempfile.TemporaryDirectory() as directory, Store(Path(directory), 10**9, 0) as store:
        for tokens in stored:
            if not store.contains(entry_for(tokens)[0].key()):
                put(store, tokens, raw_bytes=10)
        match = store.lookup(FP, block_hashes(FP, query, BT))
    best = max(shared.values())
    if best == 0:
        assert match is None
    else:
        assert match is not None and match.depth == best == shared[match.key]
