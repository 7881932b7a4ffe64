"""The persistent KV cache end to end inside one process, on the real default model.

A minimal cachekeeper (the real Store behind a ROUTER thread) serves the real
CacheClient; engines on fresh Models (nothing in memory) must restore stored
prefixes and give exactly the greedy output of an uncached run, and recompute
whenever an entry turns out damaged. Marked ``integration``: it loads the model
and prefills a 600-token document several times (about half a minute).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zmq

from reame.cachekeeper.store import Refusal, Store
from reame.shared import protocol as p
from reame.shared.config import load
from reame.shared.kv_entry import CorruptEntry, EntryHeader, encode_payload
from reame.shared.model_file import ModelFileError, model_path
from reame.worker.cache_client import CacheClient
from reame.worker.engine import Engine
from reame.worker.fingerprint import model_fingerprint
from reame.worker.model import Model, ModelError
from reame.worker.prefix_cache import PrefixCache
from tests.waiting import PATIENCE_S, wait_for

pytestmark = pytest.mark.integration

N_CTX = 1024
BLOCK_TOKENS = 64
MIN_TOKENS = 256
WAIT_S = PATIENCE_S  # upper bound only: a correct keeper answers at once
# The client's patience with the in-process keeper: generous, so that a busy machine is never
# taken for a missing cachekeeper (the timeout itself is tested with no keeper at all).
CLIENT_TIMEOUT_S = 30.0
COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white"]
DOCUMENT = "Inventory notes.\n" + "".join(
    f"Box {i} is {COLORS[i % 8]}, holds {i * 7 % 23 + 2} apples and sits on shelf {i % 5 + 1}.\n"
    for i in range(1, 34)
) + "\n"
QUESTION_A = "Question: What color is box 12?\nAnswer:"
QUESTION_B = "Question: How many apples does box 21 hold, and on which shelf is it?\nAnswer:"
GREEDY = p.SamplingParams(temperature=0.0, max_tokens=24)


class StoreKeeper:
    """A minimal cachekeeper: the real Store behind a ROUTER, one message at a time."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], address: str, directory: Path) -> None:
        self.store = Store(directory, 1 << 30, 0)
        self.flip_in_transit = False  # damage one byte of the next payload sent
        self.puts = 0
        self._context = context
        self._address = address
        self._pending: dict[str, tuple[p.CachePut, bytearray]] = {}
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
                if sock.poll(20):
                    identity, payload = sock.recv_multipart()
                    for reply in self._handle(p.decode(payload)):
                        sock.send_multipart([identity, p.encode(reply)])
        finally:
            sock.close(linger=0)

    def _handle(self, message: p.Message) -> Iterator[p.Message]:
        if isinstance(message, p.CacheLookup):
            yield from self._lookup(message)
        elif isinstance(message, p.CachePut):
            self._pending[message.request_id] = (message, bytearray())
        elif isinstance(message, p.CacheChunk):
            put, raw = self._pending[message.request_id]
            raw += message.data
            if message.last:
                del self._pending[message.request_id]
                yield self._store(put, bytes(raw))
        elif isinstance(message, p.CacheCorrupt):
            self.store.delete(message.key, message.reason)

    def _lookup(self, message: p.CacheLookup) -> Iterator[p.Message]:
        rid = message.request_id
        match = self.store.lookup(bytes.fromhex(message.fingerprint), message.blocks)
        handle = None if match is None else self.store.open_read(match.key)
        if match is None or handle is None:
            yield p.CacheMiss(rid)
            return
        with handle:
            yield p.CacheHit(rid, match.key, handle.header.encode(), match.matched_tokens)
            try:
                chunks = list(handle.chunks())
            except CorruptEntry:
                yield p.CacheMiss(rid)
                return
            if self.flip_in_transit:
                self.flip_in_transit = False
                chunks[0] = bytes([chunks[0][0] ^ 0x40]) + chunks[0][1:]
            for i, chunk in enumerate(chunks):
                yield p.CacheChunk(rid, chunk, i == len(chunks) - 1)

    def _store(self, put: p.CachePut, raw: bytes) -> p.CacheStored:
        payload = encode_payload(raw, level=1)
        header = EntryHeader.build(
            bytes.fromhex(put.fingerprint), put.kv_type, put.tokens, BLOCK_TOKENS, payload, time.time()
        )
        pending = self.store.begin_put(header)
        if isinstance(pending, Refusal):
            return p.CacheStored(put.request_id, False, pending.value)
        pending.write(payload.data)
        self.store.commit(pending)
        self.puts += 1
        return p.CacheStored(put.request_id, True)

    def wait_for_entries(self, n: int) -> None:
        wait_for(lambda: self.store.stats().entries >= n, WAIT_S, what="the state to be stored")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(WAIT_S)
        self.store.close()


@pytest.fixture(scope="module")
def path() -> Path:
    try:
        return model_path(load(None, {}))
    except ModelFileError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def fingerprint(path: Path) -> bytes:
    return model_fingerprint(path, "f16", False)


@pytest.fixture
def context() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield ctx
    ctx.term()


@pytest.fixture
def address(tmp_path: Path) -> str:
    return f"ipc://{tmp_path}/cache.ipc"


@pytest.fixture
def keeper(context: zmq.Context[zmq.Socket[bytes]], address: str, tmp_path: Path) -> Iterator[StoreKeeper]:
    keeper = StoreKeeper(context, address, tmp_path / "kv")
    yield keeper
    keeper.close()


EngineFactory = Callable[[], Engine]


@pytest.fixture
def fresh_engine(
    path: Path, fingerprint: bytes, context: zmq.Context[zmq.Socket[bytes]], address: str
) -> Iterator[EngineFactory]:
    """Make engines on new Models (nothing in memory), each with its own cache client."""
    opened: list[tuple[Model, CacheClient]] = []

    def make() -> Engine:
        model = Model(path, N_CTX, 512, 1)
        client = CacheClient(context, address, fingerprint, "f16", CLIENT_TIMEOUT_S)
        opened.append((model, client))
        return Engine(model, cache=PrefixCache(client, fingerprint, "f16", N_CTX, BLOCK_TOKENS, MIN_TOKENS))

    yield make
    for model, client in opened:
        client.close()
        model.close()


@pytest.fixture(scope="module")
def reference(path: Path) -> dict[str, str]:
    """The greedy answers computed without any cache."""
    model = Model(path, N_CTX, 512, 1)
    try:
        engine = Engine(model)
        answers = {}
        for question in (QUESTION_A, QUESTION_B):
            engine.kv.reset()
            text, done = ask(engine, DOCUMENT + question, cache=False)
            assert done.cached_tokens == 0
            answers[question] = text
        return answers
    finally:
        model.close()


def ask(engine: Engine, prompt: str, cache: bool = True, warm: bool = False) -> tuple[str, p.Done]:
    out: list[p.Message] = []
    request = p.Generate("r", GREEDY, time.time() + 120, prompt=prompt, cache=cache, warm=warm)
    engine.run(request, out.append, threading.Event())
    done = out[-1]
    assert isinstance(done, p.Done), done
    return "".join(m.text for m in out if isinstance(m, p.Delta)), done


def store_document(keeper: StoreKeeper, fresh_engine: EngineFactory, reference: dict[str, str]) -> int:
    """Ask question A on a fresh engine, which saves the prompt; return the prompt's length."""
    text, done = ask(fresh_engine(), DOCUMENT + QUESTION_A)
    assert text == reference[QUESTION_A]
    assert done.cached_tokens == 0 and done.prompt_tokens > 600
    keeper.wait_for_entries(1)
    return done.prompt_tokens


def document_tokens(engine: Engine) -> int:
    return len(engine.model.tokenize(DOCUMENT, add_special=True))


def test_restored_prefix_gives_the_uncached_output(
    keeper: StoreKeeper, fresh_engine: EngineFactory, reference: dict[str, str]
) -> None:
    store_document(keeper, fresh_engine, reference)
    engine = fresh_engine()
    text, done = ask(engine, DOCUMENT + QUESTION_B)
    assert done.cached_tokens >= document_tokens(engine) - 2
    assert text == reference[QUESTION_B]
    assert keeper.store.stats().hits == 1
    # The question added fewer than MIN_TOKENS to a stored prefix: nothing new is saved.
    assert keeper.puts == 1


def test_a_request_that_opts_out_neither_reads_nor_writes(
    keeper: StoreKeeper, fresh_engine: EngineFactory, reference: dict[str, str]
) -> None:
    text, done = ask(fresh_engine(), DOCUMENT + QUESTION_B, cache=False)
    assert (text, done.cached_tokens) == (reference[QUESTION_B], 0)
    stats = keeper.store.stats()
    assert (stats.hits, stats.misses, keeper.puts) == (0, 0, 0)


def test_damaged_file_is_recomputed_and_deleted(
    keeper: StoreKeeper, fresh_engine: EngineFactory, reference: dict[str, str]
) -> None:
    store_document(keeper, fresh_engine, reference)
    (entry_file,) = keeper.store.directory.glob("*.kv")
    data = bytearray(entry_file.read_bytes())
    data[-1000] ^= 0x01
    entry_file.write_bytes(bytes(data))
    text, done = ask(fresh_engine(), DOCUMENT + QUESTION_B)
    assert (text, done.cached_tokens) == (reference[QUESTION_B], 0)
    assert keeper.store.stats().corrupt == 1


def test_damage_in_transit_is_caught_by_the_worker(
    keeper: StoreKeeper, fresh_engine: EngineFactory, reference: dict[str, str]
) -> None:
    store_document(keeper, fresh_engine, reference)
    keeper.flip_in_transit = True
    engine = fresh_engine()
    text, done = ask(engine, DOCUMENT + QUESTION_B)
    assert (text, done.cached_tokens) == (reference[QUESTION_B], 0)
    # The worker caught it and reports it; the report travels on its own.
    wait_for(lambda: keeper.store.stats().corrupt >= 1, WAIT_S, what="the damage to be reported")


def test_a_state_llama_cpp_refuses_is_recomputed_and_reported(
    keeper: StoreKeeper, fresh_engine: EngineFactory, reference: dict[str, str], fingerprint: bytes
) -> None:
    """An entry whose checksums hold but whose state is cut short: the restore itself fails."""
    engine = fresh_engine()
    tokens = engine.model.tokenize(DOCUMENT + QUESTION_A, add_special=True)
    ask(engine, DOCUMENT + QUESTION_A, cache=False)
    engine.kv.truncate(len(tokens))
    state = engine.kv.save_state()
    payload = encode_payload(bytes(state[: len(state) // 2]), level=1)
    header = EntryHeader.build(fingerprint, "f16", tokens, BLOCK_TOKENS, payload, time.time())
    pending = keeper.store.begin_put(header)
    assert not isinstance(pending, Refusal)
    pending.write(payload.data)
    keeper.store.commit(pending)

    fresh = fresh_engine()
    text, done = ask(fresh, DOCUMENT + QUESTION_B)
    assert (text, done.cached_tokens) == (reference[QUESTION_B], 0)
    wait_for(lambda: not keeper.store.contains(header.key()), WAIT_S, what="the refused entry to be reported")


def test_warm_then_query(keeper: StoreKeeper, fresh_engine: EngineFactory, reference: dict[str, str]) -> None:
    engine = fresh_engine()
    text, done = ask(engine, DOCUMENT, warm=True)
    assert text == ""
    assert done.cache_saved and done.completion_tokens == 0 and done.finish_reason is p.FinishReason.STOP
    assert keeper.puts == 1  # stored before Done, not after
    _, again = ask(fresh_engine(), DOCUMENT, warm=True)
    assert again.cache_saved and again.cached_tokens == again.prompt_tokens - 2
    assert keeper.puts == 1  # already stored: not sent again

    fresh = fresh_engine()
    text, done = ask(fresh, DOCUMENT + QUESTION_B)
    assert text == reference[QUESTION_B]
    assert done.cached_tokens >= document_tokens(fresh) - 2


def test_a_background_warm_stops_between_batches_and_resumes_from_what_it_stored(
    keeper: StoreKeeper, fresh_engine: EngineFactory, reference: dict[str, str]
) -> None:
    engine = fresh_engine()

    class AfterOneBatch(threading.Event):
        """The dispatcher's Cancel, arriving while the first batch of the prompt is read."""

        def is_set(self) -> bool:
            return len(engine.kv) >= 512  # checked before each batch (of BACKGROUND_BATCH): the rest is not read

    out: list[p.Message] = []
    warm = p.Generate("w", GREEDY, time.time() + 120, prompt=DOCUMENT, warm=True, background=True)
    engine.run(warm, out.append, AfterOneBatch())
    assert out == [p.Error("w", p.ErrorCode.CANCELLED, "the request was cancelled")]
    keeper.wait_for_entries(1)  # what it had read: 512 tokens
    resumed = fresh_engine()
    out.clear()
    resumed.run(warm, out.append, threading.Event())
    (done,) = out
    assert isinstance(done, p.Done) and done.cache_saved
    assert done.cached_tokens == done.restored_tokens == 512 < done.prompt_tokens
    keeper.wait_for_entries(2)  # not waited for by the warm: a user request may need the worker
    fresh = fresh_engine()
    text, asked = ask(fresh, DOCUMENT + QUESTION_B)
    assert text == reference[QUESTION_B]
    assert asked.cached_tokens >= document_tokens(fresh) - 2


def test_no_cachekeeper_costs_one_timeout(
    path: Path, fingerprint: bytes, context: zmq.Context[zmq.Socket[bytes]], tmp_path: Path,
    reference: dict[str, str],
) -> None:
    model = Model(path, N_CTX, 512, 1)
    # Time stands still for the client: the prefill, however long it takes on this machine,
    # cannot outlast the pause after the timeout, so only the timeout decides.
    client = CacheClient(context, f"ipc://{tmp_path}/nobody.ipc", fingerprint, "f16", 0.2, clock=lambda: 1000.0)
    try:
        engine = Engine(model, cache=PrefixCache(client, fingerprint, "f16", N_CTX, BLOCK_TOKENS, MIN_TOKENS))
        text, done = ask(engine, DOCUMENT + QUESTION_B)
        assert (text, done.cached_tokens) == (reference[QUESTION_B], 0)
        assert not client.available
        _, warm = ask(engine, DOCUMENT[:300], warm=True)
        assert not warm.cache_saved
    finally:
        with contextlib.suppress(Exception):
            client.close()
        model.close()


@pytest.mark.parametrize("kv_type", ["q8_0", "q4_0"])
def test_quantized_kv_types_save_and_restore(path: Path, kv_type: str) -> None:
    """A quantized cache needs flash attention and gives a smaller state that restores."""
    model = Model(path, 256, 64, 1, kv_type)
    try:
        assert model.kv_type == kv_type and model.flash_attn
        engine = Engine(model)
        ask(engine, "The capital of France is", cache=False)
        tokens = engine.kv.tokens
        state = engine.kv.save_state()
        assert 0 < len(state) < 23_000 * len(tokens) / 1.8  # f16 takes about 23 KB per token here
        assert model.state_size() == len(state)
        engine.kv.reset()
        assert engine.kv.restore(bytes(state), tokens[:-1])
        assert model.positions() == len(tokens) - 1
        assert not engine.kv.restore(state[:100], tokens)
        assert len(engine.kv) == 0 and model.positions() == 0
    finally:
        model.close()


def test_unknown_kv_type_is_refused(path: Path) -> None:
    with pytest.raises(ModelError, match="unknown KV cache type 'f32'"):
        Model(path, 256, 64, 1, "f32")
