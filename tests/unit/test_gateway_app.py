"""The Falcon app against a fake dispatcher: a real ZeroMQ ROUTER on inproc:// in a thread.

The fake answers each Generate according to the prompt text (see ``FakeDispatcher.script``),
records what it received, and keeps a held request alive with heartbeats until it is
cancelled. This checks the gateway's own logic; end-to-end tests live elsewhere.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Iterable
from typing import Any

import falcon
import falcon.testing
import pytest
import zmq

from reame.gateway.api import resources
from reame.gateway.api.streams import SSEStream
from reame.gateway.app import create_app
from reame.gateway.upstream.client import Dispatcher
from reame.shared import protocol
from tests.unit.fakes import CONFIG, MAX_BODY, RETRY_AFTER, WAIT_S, FakeDispatcher, chat_body, make_app


def events(text: str) -> list[Any]:
    """Split an SSE body into its decoded data payloads ("[DONE]" stays a string)."""
    assert text.endswith("\n\n")
    payloads = []
    for frame in text.split("\n\n")[:-1]:
        assert frame.startswith("data: "), frame
        data = frame[len("data: "):]
        payloads.append(data if data == "[DONE]" else json.loads(data))
    return payloads


def error_of(result: falcon.testing.Result) -> dict[str, Any]:
    body = result.json
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


def test_chat_completion(client: falcon.testing.TestClient, fake: FakeDispatcher) -> None:
    before = time.time()
    result = client.simulate_post("/v1/chat/completions", json=chat_body(temperature=0, max_tokens=8))
    assert result.status_code == 200
    assert result.headers["content-type"] == "application/json"
    body = result.json
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    assert body["model"] == "test-model" and isinstance(body["created"], int)
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "Hello"},
                                "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
                             "prompt_tokens_details": {"cached_tokens": 1},
                             "reame": {"uncompressed_prompt_tokens": 5, "read_tokens": 4, "draft_tokens": 0,
                                       "accepted_draft_tokens": 0, "compression": CONFIG.compress.mode}}
    (sent,) = fake.generates()
    assert sent.request_id == body["id"]
    assert sent.messages == [protocol.ChatMessage("user", "hello")] and sent.prompt is None
    assert sent.sampling.temperature == 0.0 and sent.sampling.max_tokens == 8
    assert before + CONFIG.server.request_timeout <= sent.deadline <= time.time() + CONFIG.server.request_timeout


def test_chat_stream(client: falcon.testing.TestClient) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat_body(stream=True))
    assert result.status_code == 200
    assert result.headers["content-type"] == "text/event-stream"
    chunks = events(result.text)
    assert chunks[-1] == "[DONE]"
    chunks = chunks[:-1]
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and "usage" not in c for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas == [{"role": "assistant", "content": ""}, {"content": "Hel"}, {"content": "lo"}, {}]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, None, "stop"]


def test_chat_stream_with_usage(client: falcon.testing.TestClient) -> None:
    body = chat_body(stream=True, stream_options={"include_usage": True})
    chunks = events(client.simulate_post("/v1/chat/completions", json=body).text)
    assert chunks[-1] == "[DONE]"
    *content, last = chunks[:-1]
    assert all(c["usage"] is None and len(c["choices"]) == 1 for c in content)
    assert content[-1]["choices"][0]["finish_reason"] == "stop"
    assert last["choices"] == [] and last["usage"]["total_tokens"] == 7 and last["id"] == content[0]["id"]


@pytest.mark.parametrize("stream", [False, True])
def test_overload_is_a_429_with_retry_after_even_when_streaming(
    client: falcon.testing.TestClient, stream: bool
) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat_body("overloaded", stream=stream))
    assert result.status_code == 429
    assert result.headers["retry-after"] == RETRY_AFTER
    assert result.headers["content-type"] == "application/json"
    assert error_of(result)["code"] == "overloaded"


@pytest.mark.parametrize("stream", [False, True])
def test_context_length_exceeded_is_a_400(client: falcon.testing.TestClient, stream: bool) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat_body("too long", stream=stream))
    assert result.status_code == 400 and "retry-after" not in result.headers
    error = error_of(result)
    assert (error["code"], error["param"], error["type"]) == (
        "context_length_exceeded", "messages", "invalid_request_error")


def test_error_after_the_stream_started_is_an_error_event(client: falcon.testing.TestClient) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat_body("late error", stream=True))
    assert result.status_code == 200
    chunks = events(result.text)
    assert chunks[-1] == "[DONE]"
    assert chunks[-2] == {"error": {"message": "worker died", "type": "unavailable_error", "param": None,
                                    "code": "worker_lost"}}
    assert chunks[1]["choices"][0]["delta"] == {"content": "x"}


def test_heartbeats_and_garbage_while_queued_are_ignored(client: falcon.testing.TestClient) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat_body("queued"))
    assert result.status_code == 200
    assert result.json["choices"][0]["message"]["content"] == "ok"


def test_zero_token_answer(client: falcon.testing.TestClient) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat_body("empty", stream=True))
    deltas = [c["choices"][0] for c in events(result.text)[:-1]]
    assert deltas == [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None},
        {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"},
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_silent_dispatcher_is_a_503(fake: FakeDispatcher, stream: bool) -> None:
    client = falcon.testing.TestClient(make_app(fake, liveness_s=0.2))
    result = client.simulate_post("/v1/chat/completions", json=chat_body("silent", stream=stream))
    assert result.status_code == 503
    assert result.headers["retry-after"] == RETRY_AFTER
    assert error_of(result)["code"] == "dispatcher_unavailable"


class StartResponse:
    """The WSGI start_response of a server, recording the status line."""

    def __init__(self) -> None:
        self.statuses: list[str] = []

    def __call__(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        self.statuses.append(status)
        return lambda data: None


def close(body: Iterable[bytes]) -> None:
    """Close a WSGI body as a server does when it is done with it or the client is gone."""
    if isinstance(body, SSEStream):
        body.close()


def test_closing_a_stream_early_cancels_the_request(
    fake: FakeDispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(fake)
    environ = falcon.testing.create_environ(
        method="POST", path="/v1/chat/completions", body=json.dumps(chat_body("hold", stream=True))
    )
    start_response = StartResponse()
    body = app(environ, start_response)
    assert start_response.statuses == ["200 OK"]
    iterator = iter(body)
    first = json.loads(next(iterator)[6:])
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert json.loads(next(iterator)[6:])["choices"][0]["delta"] == {"content": "tick"}
    assert not fake.cancelled.is_set()
    with caplog.at_level(logging.INFO, logger="gateway.requests"):
        close(body)  # what gunicorn does when the client hangs up
    assert fake.cancelled.wait(WAIT_S)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "gateway.requests"]
    assert line.startswith(first["id"]) and line.endswith(" error=client_gone")
    assert " 499 " in line  # as when a client hangs up before a non-streamed answer
    cancels = [m for m in fake.received if isinstance(m, protocol.Cancel)]
    assert [c.request_id for c in cancels] == [first["id"]]


@pytest.mark.parametrize("stream", [False, True])
def test_client_that_hangs_up_while_waiting_is_noticed_and_cancelled(
    fake: FakeDispatcher, caplog: pytest.LogCaptureFixture, stream: bool
) -> None:
    app = make_app(fake)
    server_end, client_end = socket.socketpair()
    client_end.close()  # the client is gone before anything was written to it
    environ = falcon.testing.create_environ(
        method="POST", path="/v1/chat/completions", body=json.dumps(chat_body("hold", stream=stream))
    )
    environ["gunicorn.socket"] = server_end
    start_response = StartResponse()
    try:
        with caplog.at_level(logging.INFO, logger="gateway.requests"):
            body = app(environ, start_response)
            chunks = list(body)  # a stream ends by itself at the next heartbeat
            close(body)
    finally:
        server_end.close()
    assert fake.cancelled.wait(WAIT_S)
    assert start_response.statuses[0].startswith("200" if stream else "499")
    assert len(chunks) == (2 if stream else 0)  # role chunk and "tick", then nothing, no [DONE]
    (line,) = [r.getMessage() for r in caplog.records if r.name == "gateway.requests"]
    assert " 499 " in line and line.endswith("error=client_gone")


def test_a_connected_client_is_not_taken_for_gone() -> None:
    server_end, client_end = socket.socketpair()
    probe = resources.disconnect_probe({"gunicorn.socket": server_end})
    assert probe is not None and not probe()
    client_end.sendall(b"GET /next HTTP/1.1\r\n")  # a pipelined request is not a hang-up
    assert not probe()
    client_end.close()
    server_end.recv(100)
    assert probe()
    server_end.close()
    assert resources.disconnect_probe({}) is None


def test_completion_one_prompt_with_echo(client: falcon.testing.TestClient, fake: FakeDispatcher) -> None:
    result = client.simulate_post("/v1/completions", json={"prompt": "p0", "echo": True, "max_tokens": 3})
    assert result.status_code == 200
    body = result.json
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    assert body["choices"] == [{"index": 0, "text": "p0<p0>", "logprobs": None, "finish_reason": "length"}]
    (sent,) = fake.generates()
    assert (sent.request_id, sent.prompt, sent.messages) == (body["id"], "p0", None)


def test_completion_several_prompts(client: falcon.testing.TestClient, fake: FakeDispatcher) -> None:
    result = client.simulate_post("/v1/completions", json={"prompt": ["p0", "p1"]})
    body = result.json
    assert [(c["index"], c["text"]) for c in body["choices"]] == [(0, "<p0>"), (1, "<p1>")]
    assert body["usage"]["prompt_tokens"] == 2 and body["usage"]["completion_tokens"] == 2
    assert [g.request_id for g in fake.generates()] == [body["id"] + "-0", body["id"] + "-1"]


def test_completion_stream_several_prompts(client: falcon.testing.TestClient) -> None:
    body = {"prompt": ["p0", "p1"], "stream": True, "echo": True, "stream_options": {"include_usage": True}}
    chunks = events(client.simulate_post("/v1/completions", json=body).text)
    assert chunks[-1] == "[DONE]"
    *content, last = chunks[:-1]
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in content)
    texts = [(c["choices"][0]["index"], c["choices"][0]["text"], c["choices"][0]["finish_reason"])
             for c in content]
    assert texts == [(0, "p0", None), (0, "<p0>", None), (0, "", "length"),
                     (1, "p1", None), (1, "<p1>", None), (1, "", "length")]
    assert last["choices"] == [] and last["usage"]["total_tokens"] == 4


def test_completion_token_prompt_is_refused(client: falcon.testing.TestClient, fake: FakeDispatcher) -> None:
    result = client.simulate_post("/v1/completions", json={"prompt": [1, 2, 3]})
    assert result.status_code == 400 and error_of(result)["param"] == "prompt"
    assert fake.generates() == []


def test_models(client: falcon.testing.TestClient) -> None:
    listing = client.simulate_get("/v1/models").json
    assert listing["object"] == "list" and [m["id"] for m in listing["data"]] == ["test-model"]
    one = client.simulate_get("/v1/models/test-model")
    assert one.status_code == 200 and one.json == listing["data"][0]
    missing = client.simulate_get("/v1/models/org/other-model")
    assert missing.status_code == 404
    assert error_of(missing)["code"] == "model_not_found"


def test_health_and_ready(client: falcon.testing.TestClient) -> None:
    assert client.simulate_get("/health").json == {"status": "ok"}
    ready = client.simulate_get("/ready")
    assert ready.status_code == 200 and ready.json["workers"] == 1


def test_not_ready_without_workers(client: falcon.testing.TestClient, fake: FakeDispatcher) -> None:
    fake.workers = 0
    result = client.simulate_get("/ready")
    assert result.status_code == 503 and error_of(result)["code"] == "no_workers"


def test_not_ready_without_dispatcher(context: zmq.Context[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resources, "READY_TIMEOUT_S", 0.1)
    app = create_app(CONFIG, Dispatcher("inproc://nobody-home", context=context))
    result = falcon.testing.TestClient(app).simulate_get("/ready")
    assert result.status_code == 503 and error_of(result)["code"] == "dispatcher_unavailable"
    assert result.headers["retry-after"] == RETRY_AFTER


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/nothing", 404, "not_found"),
        ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
        ("DELETE", "/v1/models", 405, "method_not_allowed"),
        ("POST", "/health", 405, "method_not_allowed"),
    ],
)
def test_falcon_errors_use_the_openai_shape(
    client: falcon.testing.TestClient, method: str, path: str, status: int, code: str
) -> None:
    result = client.simulate_request(method, path)
    assert result.status_code == status and error_of(result)["code"] == code
    if status == 405:
        assert "allow" in result.headers


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"", "invalid_json"),
        (b"{", "invalid_json"),
        (b'{"messages": NaN}', "invalid_json"),
        (b"[" * 2000, "invalid_json"),  # deeper than json's recursion limit
        (b"\xff\xfe\x00", "invalid_json"),
        (b'{"messages": [{"role": "user", "content": "x"}], "temperature": 1e999}', "invalid_type"),
        (b'"just a string"', "invalid_type"),
        (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "invalid_value"),
    ],
)
def test_bad_bodies_are_400s(client: falcon.testing.TestClient, body: bytes, code: str) -> None:
    result = client.simulate_post("/v1/chat/completions", body=body, content_type="application/json")
    assert result.status_code == 400
    error = error_of(result)
    assert (error["type"], error["code"]) == ("invalid_request_error", code)


def test_oversized_body_is_a_413(client: falcon.testing.TestClient, fake: FakeDispatcher) -> None:
    result = client.simulate_post("/v1/chat/completions", json=chat_body("x" * MAX_BODY))
    assert result.status_code == 413 and error_of(result)["code"] == "request_too_large"
    assert fake.generates() == []


def test_body_longer_than_its_content_length_is_read_no_further() -> None:
    environ = falcon.testing.create_environ(method="POST", body=b"{}" + b" " * MAX_BODY)
    environ["CONTENT_LENGTH"] = "2"
    assert resources.read_json(falcon.Request(environ), MAX_BODY) == {}


def test_chunked_body_over_the_limit_is_a_413() -> None:
    environ = falcon.testing.create_environ(method="POST", body=b" " * (MAX_BODY + 10) + b"{}",
                                            headers={"Transfer-Encoding": "chunked"})
    del environ["CONTENT_LENGTH"]
    with pytest.raises(Exception) as caught:
        resources.read_json(falcon.Request(environ), MAX_BODY)
    assert getattr(caught.value, "status", None) == 413


class BrokenDispatcher(Dispatcher):
    def open(self, request: protocol.Generate, abandoned: Any = None, then: Any = None) -> Any:
        raise RuntimeError("a bug")


def test_a_bug_is_a_logged_500(context: zmq.Context[Any], caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(CONFIG, BrokenDispatcher("inproc://unused", context=context))
    with caplog.at_level(logging.ERROR):
        result = falcon.testing.TestClient(app).simulate_post("/v1/chat/completions", json=chat_body())
    assert result.status_code == 500 and error_of(result)["code"] == "internal_error"
    assert any(r.exc_info and "a bug" in str(r.exc_info[1]) for r in caplog.records)


def test_one_log_line_per_request(client: falcon.testing.TestClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gateway.requests"):
        plain = client.simulate_post("/v1/chat/completions", json=chat_body()).json
        client.simulate_post("/v1/chat/completions", json=chat_body("late error", stream=True))
        client.simulate_post("/v1/chat/completions", json=chat_body("overloaded"))
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.requests"]
    assert len(lines) == 3
    assert lines[0].startswith(
        f"{plain['id']} POST /v1/chat/completions 200 prompt_tokens=5 cached_tokens=1 completion_tokens=2 "
    )
    assert "ttft=0." in lines[0] and "total=" in lines[0]
    assert " 200 " in lines[1] and lines[1].endswith("error=worker_lost")
    assert " 429 " in lines[2] and "ttft=-" in lines[2]
