"""A chunked prefill's sources, in order: the kept prefix, the worker's memory, the store, reading alone."""

from __future__ import annotations

from typing import cast

import pytest

from reame.worker.chunk_memory import ChunkMemory
from reame.worker.chunk_plan import LINK_TOKENS, Span, chunk_spans
from reame.worker.chunk_store import ChunkStore, chunk_fingerprint
from reame.worker.chunked_prefill import prefill
from reame.worker.kv import KvCache
from reame.worker.model import Model
from tests.unit.fakes import BLOCK, FINGERPRINT, FakeModel, FakeService

N_CTX = 4096
A = list(range(1000, 1080))
B = list(range(2000, 2090))
C = list(range(3000, 3070))
HEAD, TAIL = [1, 2, 3], [7, 8, 9]


def prompt(*chunks: list[int]) -> tuple[list[int], tuple[Span, ...]]:
    runs = [(len(HEAD), False), *((len(chunk), True) for chunk in chunks), (len(TAIL), False)]
    return [*HEAD, *(token for chunk in chunks for token in chunk), *TAIL], chunk_spans(runs)


def store(service: FakeService, memory: int = 1 << 20) -> ChunkStore:
    return ChunkStore(service, FINGERPRINT, "f16", N_CTX, BLOCK, LINK_TOKENS, ChunkMemory(memory))


def read(kv: KvCache, chunks: ChunkStore | None, *parts: list[int]) -> tuple[int, int, int, int, int]:
    tokens, spans = prompt(*parts)
    reuse = prefill(kv, chunks, tokens, spans, "", 512, lambda: None)
    assert kv.tokens == tuple(tokens)
    return reuse.in_memory, reuse.from_store, reuse.read, reuse.cached, reuse.restored


@pytest.fixture
def service() -> FakeService:
    return FakeService()


def fresh_kv() -> KvCache:
    return KvCache(cast(Model, FakeModel()))


def test_chunks_read_alone_are_held_in_memory_and_placed_from_there_in_another_order(service: FakeService) -> None:
    chunks = store(service)
    assert read(fresh_kv(), chunks, A, B) == (0, 0, 2, 0, 0)
    assert len(chunks.memory) == 2
    # Another worker's KV cache (nothing kept), the same memory: no trip to the store.
    in_memory, from_store, fresh, cached, restored = read(fresh_kv(), chunks, B, A)
    assert (in_memory, from_store, fresh, restored) == (2, 0, 0, 0)
    assert cached == len(A) + len(B) - 2 * LINK_TOKENS
    assert service.lookups == 2  # the first read's, both misses


def test_chunks_not_in_memory_come_from_the_store_and_stay_in_memory(service: FakeService) -> None:
    reader = store(service)
    read(fresh_kv(), reader, A, B)
    for tokens, state in [(A, b"chunk:%d" % len(A)), (B, b"chunk:%d" % len(B))]:
        service.put(tokens, state, fingerprint=chunk_fingerprint(FINGERPRINT, "", LINK_TOKENS, tokens))
    other = store(service)  # another worker: its memory is empty
    _, from_store, fresh, cached, restored = read(fresh_kv(), other, B, C)
    assert (from_store, fresh) == (1, 1) and restored == cached == len(B) - LINK_TOKENS
    lookups = service.lookups
    assert read(fresh_kv(), other, C, B)[:3] == (2, 0, 0) and service.lookups == lookups


def test_memory_keeps_the_most_recently_used_under_its_cap() -> None:
    memory = ChunkMemory(10)
    memory.put(b"a", b"1234")
    memory.put(b"b", b"1234")
    assert memory.get(b"a") == b"1234"  # now the most recent
    memory.put(b"c", b"1234")
    assert memory.get(b"b") is None and memory.get(b"a") is not None and memory.size == 8
    memory.put(b"d", b"x" * 11)  # larger than the cap: not held, nothing pushed out
    assert memory.get(b"d") is None and len(memory) == 2
    memory.drop(b"a")
    assert memory.get(b"a") is None and memory.size == 4
    none = ChunkMemory(0)  # cache.chunk_memory = 0
    none.put(b"a", b"1")
    assert none.get(b"a") is None


def test_a_state_held_in_memory_that_llama_cpp_refuses_is_dropped_and_read_again(service: FakeService) -> None:
    chunks = store(service)
    key = chunk_fingerprint(FINGERPRINT, "", LINK_TOKENS, A)
    chunks.memory.put(key, b"garbage")
    assert read(fresh_kv(), chunks, A)[:3] == (0, 0, 1)
    assert chunks.memory.get(key) == b"chunk:%d" % len(A)  # the fresh state replaced it
    assert service.corrupt == []  # the store's entries are not to blame


def test_a_scope_never_finds_another_scope_s_chunks_in_memory(service: FakeService) -> None:
    chunks = store(service)
    tokens, spans = prompt(A)
    prefill(fresh_kv(), chunks, tokens, spans, "scope-1", 512, lambda: None)
    reuse = prefill(fresh_kv(), chunks, tokens, spans, "scope-2", 512, lambda: None)
    assert (reuse.in_memory, reuse.read) == (0, 1)


def test_no_store_means_nothing_looked_up_nor_held() -> None:
    assert read(fresh_kv(), None, A, B) == (0, 0, 2, 0, 0)
