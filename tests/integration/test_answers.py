"""The answer cache through a real `reame serve`: hits, misses, corruption, and hits while every worker is busy."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Server, cache_stats, start_server
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

KEY_A = "sk-reame-answers-a-5f1c0e9b7a2d"
KEY_B = "sk-reame-answers-b-90d4e6a1c3f7"
DOCUMENT = ("The Harbour Street office opens at 8:30 and closes at 17:45 on weekdays. "
            "A bike costs 14 euros per day. Helmets are free; locks cost 2 euros per day.")
EOS_BANNED = {"2": -100}  # SmolLM2's end-of-text token: the reply runs to max_tokens


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("answers"), cache_answers="true",
                           server_api_keys=f"{KEY_A},{KEY_B}")
    yield running
    assert not running.stop()


def body(question: str, **fields: Any) -> dict[str, Any]:
    return {
        "model": "m", "temperature": 0, "max_tokens": 12,
        "messages": [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": question}], **fields,
    }


def post(server: Server, payload: dict[str, Any], key: str = KEY_A) -> tuple[dict[str, Any], bytes]:
    status, _, raw = server.request("POST", "/v1/chat/completions", json.dumps(payload).encode(),
                                    {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    assert status == 200, raw
    return (json.loads(raw) if not payload.get("stream") else {}), raw


def chat(server: Server, payload: dict[str, Any], key: str = KEY_A) -> dict[str, Any]:
    return post(server, payload, key)[0]


def answer_cache(reply: dict[str, Any]) -> str | None:
    value: str | None = reply["usage"]["reame"].get("answer_cache")
    return value


def until_hit(server: Server, payload: dict[str, Any], key: str = KEY_A) -> dict[str, Any]:
    """Ask until the answer is served from the store (it is saved as the first reply ends)."""

    def hit() -> dict[str, Any] | None:
        reply = chat(server, payload, key)
        return reply if answer_cache(reply) == "hit" else None

    return wait_for(hit, interval=0.2, what="an answer cache hit")


def events(raw: bytes) -> list[dict[str, Any]]:
    lines = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def shape(chunks: list[dict[str, Any]]) -> list[Any]:
    """What a client sees of a stream, without the response's id and time."""
    return [(c["object"], c["choices"], (c.get("usage") or {}).get("completion_tokens")) for c in chunks]


def test_a_repeated_greedy_request_is_a_hit_with_the_same_text(server: Server) -> None:
    payload = body("When does the office close?")
    first = chat(server, payload)
    assert answer_cache(first) == "miss"
    hit = until_hit(server, payload)
    assert hit["choices"] == first["choices"]
    assert hit["id"] != first["id"]
    assert hit["usage"]["prompt_tokens_details"]["cached_tokens"] == hit["usage"]["prompt_tokens"]
    assert hit["usage"]["completion_tokens"] == first["usage"]["completion_tokens"]
    stats = cache_stats(server)
    assert stats["answer_hits"] >= 1 and stats["answer_entries"] >= 1
    _, _, metrics = server.request("GET", "/metrics", headers={"Authorization": f"Bearer {KEY_A}"})
    assert b"reame_answer_cache_hits_total" in metrics


def test_a_streamed_hit_replays_the_same_chunks(server: Server) -> None:
    question = "What does a lock cost?"
    streamed = body(question, stream=True, stream_options={"include_usage": True}, logprobs=True, top_logprobs=2)
    _, fresh = post(server, {**streamed, "reame": {"answer_cache": False}})  # what the worker streams
    chat(server, {**streamed, "stream": False, "stream_options": None})  # stores it (the same Generate)
    wait_for(lambda: answer_cache(chat(server, {**streamed, "stream": False, "stream_options": None})) == "hit",
             interval=0.2, what="the stored answer")
    _, replay = post(server, streamed)
    fresh_chunks, replay_chunks = events(fresh), events(replay)
    assert shape(replay_chunks) == shape(fresh_chunks)
    assert "answer_cache" not in fresh_chunks[-1]["usage"]["reame"]
    usage = replay_chunks[-1]["usage"]
    assert usage["reame"]["answer_cache"] == "hit"
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"]
    assert replay_chunks[0]["id"] != fresh_chunks[0]["id"]


def test_any_output_relevant_change_is_a_miss(server: Server) -> None:
    payload = body("How much is a bike per day?")
    until_hit(server, payload)
    changes: dict[str, dict[str, Any]] = {
        "max_tokens": {"max_tokens": 11},
        "stop": {"stop": ["."]},
        "seed": {"seed": 5},
        "a seeded temperature": {"temperature": 0.8, "seed": 5},
        "logit_bias": {"logit_bias": {"11": 5}},
        "presence_penalty": {"presence_penalty": 0.5},
        "frequency_penalty": {"frequency_penalty": 0.5},
        "top_k": {"top_k": 5},
        "response_format": {"response_format": {"type": "json_object"}},
        "logprobs": {"logprobs": True},
        "speculative": {"reame": {"speculative": "off"}},
        "cache_salt": {"reame": {"cache_salt": "user-7"}},
        "question": {"messages": [{"role": "system", "content": DOCUMENT},
                                  {"role": "user", "content": "How much is a bike per day!"}]},
        "document": {"messages": [{"role": "system", "content": DOCUMENT + " Closed on Sundays."},
                                  {"role": "user", "content": "How much is a bike per day?"}]},
    }
    for name, change in changes.items():
        assert answer_cache(chat(server, {**payload, **change})) == "miss", name
    assert answer_cache(chat(server, payload, key=KEY_B)) == "miss"  # another key's scope (per_key)
    assert answer_cache(chat(server, payload)) == "hit"  # and the original is still there


def test_sampling_without_a_seed_is_never_cached(server: Server) -> None:
    payload = body("Are helmets free?", temperature=0.7)
    for _ in range(3):
        assert answer_cache(chat(server, payload)) is None
    assert answer_cache(chat(server, {**body("Are helmets free?"), "reame": {"answer_cache": False}})) is None


def test_a_corrupted_answer_is_a_miss_not_an_error(server: Server) -> None:
    answers = server.cache_dir / "answers"
    before = set(answers.glob("*.ans"))
    payload = body("When does the office open?")
    first = until_hit(server, payload)
    (path,) = set(answers.glob("*.ans")) - before
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x20
    path.write_bytes(bytes(data))
    again = chat(server, payload)
    assert answer_cache(again) == "miss"
    assert again["choices"] == first["choices"]
    assert until_hit(server, payload)["choices"] == first["choices"]  # stored again, whole


def test_a_hit_is_served_while_every_worker_is_busy(server: Server) -> None:
    payload = body("Where is the office?")
    until_hit(server, payload)
    long = {**body("Tell me a long story."), "max_tokens": 3000, "logit_bias": EOS_BANNED, "stream": True,
            "reame": {"answer_cache": False}}
    conns = []
    try:
        for i in range(2):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
            long["messages"][1]["content"] = f"Tell me long story number {i}."
            conn.request("POST", "/v1/chat/completions", json.dumps(long).encode(),
                         {"Content-Type": "application/json", "Authorization": f"Bearer {KEY_A}"})
            response = conn.getresponse()
            assert response.status == 200
            while b'"content":"' not in response.readline():
                pass  # until its first chunk: its worker is generating
            conns.append(conn)
        ready = server.ready()
        assert ready is not None and ready["idle_workers"] == 0
        hit = chat(server, payload)
        assert answer_cache(hit) == "hit"
        # Both long replies were running before the hit was asked and still are after it was answered.
        ready = server.ready()
        assert ready is not None and ready["running"] == 2 and ready["idle_workers"] == 0
    finally:
        for conn in conns:
            conn.close()


def test_answers_survive_a_restart_and_another_model_misses(tmp_path: Path) -> None:
    payload = body("What does a bike cost?")
    first = start_server(tmp_path / "a", workers=1, cache_answers="true", cache_dir=str(tmp_path / "cache"))
    try:
        until_hit(first, payload)
    finally:
        first.stop()
    same = start_server(tmp_path / "b", workers=1, cache_answers="true", cache_dir=str(tmp_path / "cache"))
    try:
        assert answer_cache(chat(same, payload)) == "hit"
    finally:
        same.stop()
    # Another KV layout is another model fingerprint: its replies may differ, so nothing is shared.
    other = start_server(tmp_path / "c", workers=1, cache_answers="true", cache_dir=str(tmp_path / "cache"),
                         memory_kv_type="q8_0")
    try:
        assert answer_cache(chat(other, payload)) == "miss"
    finally:
        other.stop()
