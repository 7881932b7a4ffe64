"""The answer cache: who is eligible, what the key covers, the store's integrity and cap, the round trip."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from reame.cachekeeper.admin import offline
from reame.cachekeeper.answers import AnswerStore, answer, decode_file, encode_file
from reame.cachekeeper.server import Keeper
from reame.cachekeeper.store import Store
from reame.gateway.api.responses import Usage
from reame.gateway.api.validation import parse_chat
from reame.gateway.http.errors import APIError
from reame.gateway.upstream.answers import (
    AnswerCache,
    ReplayCall,
    answer_key,
    decode_reply,
    eligible,
    encode_reply,
    model_identity,
)
from reame.shared import protocol as p
from reame.shared.config import load
from reame.shared.lifecycle import StopFlag
from reame.shared.modes import SpeculativeMode
from reame.shared.upstream import Upstream
from tests.waiting import wait_for

ID = b"\x01" * 32
KEY = "ab" * 32
GREEDY = p.SamplingParams(temperature=0.0, max_tokens=16)
BASE = p.Generate("r1", GREEDY, 1.0, messages=[p.ChatMessage("system", "doc"), p.ChatMessage("user", "q?")])
REPLY: list[p.Delta | p.Done] = [
    p.Delta("r1", "Hel", 1, [p.TokenLogprob(b"Hel", -0.1)]),
    p.Delta("r1", "lo", 1),
    p.Done("r1", p.FinishReason.STOP, prompt_tokens=20, completion_tokens=2, cached_tokens=4, prompt_ms=9.0),
]


def test_only_fully_determined_requests_are_eligible() -> None:
    assert eligible(BASE)
    sampled = msgspec.structs.replace(BASE, sampling=p.SamplingParams(temperature=0.7))
    assert not eligible(sampled)
    assert eligible(msgspec.structs.replace(BASE, sampling=p.SamplingParams(temperature=0.7, seed=3)))
    assert not eligible(msgspec.structs.replace(BASE, warm=True))
    assert not eligible(msgspec.structs.replace(BASE, cache=False))
    assert not eligible(BASE, answer_cache=False)


def _variants() -> dict[str, p.Generate]:
    s = GREEDY
    sampling = {
        "temperature": 0.5, "top_p": 0.5, "top_k": 3, "min_p": 0.2, "seed": 7, "max_tokens": 17,
        "stop": ["\n"], "presence_penalty": 0.5, "frequency_penalty": 0.5, "repeat_penalty": 1.1,
        "repeat_last_n": 8, "logit_bias": [(5, -100.0)],
    }
    variants = {f"sampling.{name}": msgspec.structs.replace(BASE, sampling=msgspec.structs.replace(s, **{name: v}))
                for name, v in sampling.items()}
    messages = BASE.messages or []
    variants.update({
        "document": msgspec.structs.replace(BASE, messages=[p.ChatMessage("system", "doc2"), messages[1]]),
        "question": msgspec.structs.replace(BASE, messages=[messages[0], p.ChatMessage("user", "q!")]),
        "role": msgspec.structs.replace(BASE, messages=[p.ChatMessage("user", "doc"), messages[1]]),
        "name": msgspec.structs.replace(BASE, messages=[messages[0], p.ChatMessage("user", "q?", name="ann")]),
        "prompt": msgspec.structs.replace(BASE, messages=None, prompt="doc q?"),
        "scope": msgspec.structs.replace(BASE, cache_scope="ab" * 16),
        "grammar": msgspec.structs.replace(BASE, grammar='root ::= "{}"'),
        "logprobs": msgspec.structs.replace(BASE, logprobs=0),
        "speculative": msgspec.structs.replace(BASE, speculative=SpeculativeMode.OFF),
    })
    return variants


@pytest.mark.parametrize(("name", "request_"), list(_variants().items()))
def test_every_output_relevant_field_changes_the_key(name: str, request_: p.Generate) -> None:
    assert answer_key(ID, request_) != answer_key(ID, BASE), name


def test_the_model_changes_the_key_and_the_request_id_does_not() -> None:
    assert answer_key(b"\x02" * 32, BASE) != answer_key(ID, BASE)
    same = msgspec.structs.replace(BASE, request_id="other", deadline=99.0)
    assert answer_key(ID, same) == answer_key(ID, BASE)
    # 0 sent as an integer is the same request as 0.0
    as_int = msgspec.structs.replace(BASE, sampling=msgspec.structs.replace(GREEDY, temperature=0))
    assert answer_key(ID, as_int) == answer_key(ID, BASE)


def test_the_model_is_named_by_the_fingerprints_the_workers_report() -> None:
    config = load(None, environ={})

    def status(*prints: tuple[bytes, bytes]) -> p.Status:
        states = [p.WorkerState(f"w{i}", busy=False, served=0, fingerprint=f, draft_fingerprint=d)
                  for i, (f, d) in enumerate(prints)]
        return p.Status(workers=len(states), idle_workers=len(states), queued=0, running=0, worker_states=states)

    one = model_identity(config, status((ID, b""), (ID, b"")))
    assert one is not None and one == model_identity(config, status((ID, b"")))
    assert model_identity(config, status((ID, b"\x03" * 32))) not in (None, one)  # a draft model counts
    other_layout = dataclasses.replace(config, memory=dataclasses.replace(config.memory, kv_type="q8_0"))
    assert model_identity(other_layout, status((ID, b""))) != one
    # Unknown: the dispatcher is silent, no worker is attached, one says nothing, or they disagree.
    for unknown in (None, status(), status((b"", b"")), status((ID, b""), (b"\x02" * 32, b""))):
        assert model_identity(config, unknown) is None


def test_a_replay_is_the_same_messages_marked_as_a_hit() -> None:
    reply = decode_reply(encode_reply(REPLY), "r9")
    assert reply is not None
    assert [m.request_id for m in reply] == ["r9"] * 3
    assert [m.text for m in reply if isinstance(m, p.Delta)] == ["Hel", "lo"]
    assert reply[0].logprobs == REPLY[0].logprobs  # type: ignore[union-attr]
    done = reply[-1]
    assert isinstance(done, p.Done)
    assert (done.cached_tokens, done.prompt_tokens, done.answer_cache, done.prompt_ms) == (20, 20, "hit", 0.0)
    call = ReplayCall(BASE, reply)
    assert [call.next() for _ in range(3)] == reply and call.finished


@pytest.mark.parametrize("data", [b"", b"\xc1", msgspec.msgpack.encode([b"nope"]),
                                  msgspec.msgpack.encode([p.encode(REPLY[0])])])
def test_an_unusable_stored_reply_is_a_miss(data: bytes) -> None:
    assert decode_reply(data, "r1") is None


def test_usage_says_hit_only_when_every_generation_hit() -> None:
    hit, miss = Usage(1, answer_cache="hit"), Usage(1, answer_cache="miss")
    assert (hit + hit).answer_cache == "hit"
    assert (hit + miss).answer_cache == "miss" and (miss + hit).answer_cache == "miss"
    assert (Usage() + hit).to_dict()["reame"]["answer_cache"] == "hit"
    assert "answer_cache" not in Usage(3).to_dict()["reame"]


# -- the store ---------------------------------------------------------------


def test_store_round_trip_and_counters(tmp_path: Path) -> None:
    store = AnswerStore(tmp_path, 1 << 20)
    assert store.get(KEY) is None
    assert store.put(KEY, b"payload")
    assert store.get(KEY) == b"payload"
    stats = store.stats()
    assert (stats.entries, stats.hits, stats.misses) == (1, 1, 1)
    assert AnswerStore(tmp_path, 1 << 20).get(KEY) == b"payload"  # kept across a restart


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "other_key"])
def test_a_corrupt_answer_is_a_miss_and_is_deleted(tmp_path: Path, damage: str) -> None:
    store = AnswerStore(tmp_path, 1 << 20)
    store.put(KEY, b"payload" * 10)
    path = tmp_path / f"{KEY}.ans"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-3] ^= 0x40
    elif damage == "truncate":
        del data[-5:]
    elif damage == "empty":
        data.clear()
    else:  # a whole file under another key's name
        data = bytearray(encode_file("cd" * 32, b"payload" * 10))
    path.write_bytes(bytes(data))
    assert store.get(KEY) is None
    assert not path.exists()
    assert store.stats().corrupt == 1 and store.stats().entries == 0


def test_the_file_check() -> None:
    assert decode_file(KEY, encode_file(KEY, b"x")) == b"x"


def test_least_recently_used_answers_go_first_under_the_cap(tmp_path: Path) -> None:
    size = len(encode_file(KEY, b"x" * 100))
    store = AnswerStore(tmp_path, 3 * size)
    keys = [f"{i:064x}" for i in range(4)]
    for key in keys[:3]:
        assert store.put(key, b"x" * 100)
    assert store.get(keys[0]) is not None  # now the most recently used
    assert store.put(keys[3], b"x" * 100)
    assert store.get(keys[1]) is None  # the least recently used was evicted
    assert all(store.get(key) is not None for key in (keys[0], keys[2], keys[3]))
    assert store.stats().bytes == 3 * size and store.stats().evictions == 1
    assert not store.put(keys[1], b"x" * 4 * size)  # larger than the whole cap: refused


def test_start_up_drops_temporary_files_and_keeps_the_cap(tmp_path: Path) -> None:
    store = AnswerStore(tmp_path, 1 << 20)
    for i in range(3):
        store.put(f"{i:064x}", b"y" * 50)
    (tmp_path / f".{KEY}.1234.tmp").write_bytes(b"half")
    smaller = AnswerStore(tmp_path, len(encode_file(KEY, b"y" * 50)))
    assert smaller.stats().entries == 1
    assert not list(tmp_path.glob(".*"))


def test_the_handler(tmp_path: Path) -> None:
    store = AnswerStore(tmp_path, 1 << 20)
    assert answer(store, p.AnswerPut("q1", KEY, b"data")) is None
    assert answer(store, p.AnswerLookup("q2", KEY)) == p.AnswerFound("q2", b"data")
    assert answer(store, p.AnswerLookup("q3", "../../etc/passwd")) == p.CacheMiss("q3")
    assert answer(store, p.AnswerPut("q4", "../x", b"data")) is None and store.stats().entries == 1
    assert answer(None, p.AnswerLookup("q5", KEY)) == p.CacheMiss("q5")


# -- the gateway and the cachekeeper, over real sockets -----------------------


@pytest.fixture
def keeper() -> Iterator[tuple[str, Keeper, AnswerStore]]:
    top = Path(tempfile.mkdtemp(prefix="reame-a"))  # ipc:// paths are short
    address = f"ipc://{top}/run/cache.ipc"
    answers = AnswerStore(top / "kv" / "answers", 1 << 20)
    running = Keeper(Store(top / "kv", 10**9, 0), address, block_tokens=4, level=1, answers=answers)
    running.bind()
    stop = StopFlag()
    thread = threading.Thread(target=running.run, args=(stop,), daemon=True)
    thread.start()
    yield address, running, answers
    stop.set()
    thread.join()
    running.close()
    shutil.rmtree(top)


def test_a_saved_answer_is_found_and_counted(keeper: tuple[str, Keeper, AnswerStore]) -> None:
    address, running, _ = keeper
    context: zmq.Context[Any] = zmq.Context()
    config = load(None, environ={})
    cache = AnswerCache(config, address, Upstream(context), identity=lambda _: ID)
    key = cache.key(BASE)
    assert key is not None and cache.key(BASE, answer_cache=False) is None
    assert cache.lookup(key, "r1") is None
    cache.save(key, REPLY)
    reply = wait_for(lambda: cache.lookup(key, "r2"), what="the stored answer")
    assert [m.text for m in reply if isinstance(m, p.Delta)] == ["Hel", "lo"]
    report = running.report("x", [])
    assert (report.answer_entries, report.answer_hits) == (1, 1) and report.answer_misses >= 1
    off = AnswerCache(dataclasses.replace(config, cache=dataclasses.replace(config.cache, answers=False)),
                      address, Upstream(context), identity=lambda _: ID)
    assert off.key(BASE) is None
    context.destroy(linger=0)


def test_the_request_option_is_a_boolean() -> None:
    config = load(None, environ={})
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert parse_chat(chat, config.sampling).options.answer_cache
    assert not parse_chat({**chat, "reame": {"answer_cache": False}}, config.sampling).options.answer_cache
    with pytest.raises(APIError) as caught:
        parse_chat({**chat, "reame": {"answer_cache": "no"}}, config.sampling)
    assert caught.value.param == "reame.answer_cache"


def test_an_offline_purge_empties_the_answers_too(tmp_path: Path) -> None:
    store = AnswerStore(tmp_path / "answers", 1 << 20)
    store.put(KEY, b"data")
    config = load(None, environ={"REAME_CACHE_DIR": str(tmp_path)})
    offline(config, p.CacheCommand.PURGE)
    assert not list((tmp_path / "answers").iterdir())
