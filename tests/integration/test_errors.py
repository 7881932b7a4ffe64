"""Every malformed request gets a 4xx in OpenAI's error shape that names the field."""

from __future__ import annotations

import json
import socket
from typing import Any

import pytest

from tests.harness import Server

pytestmark = pytest.mark.integration

CHAT_OK: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
COMPLETION_OK: dict[str, Any] = {"model": "m", "prompt": "hi", "max_tokens": 2}


def chat(**changes: Any) -> dict[str, Any]:
    body = dict(CHAT_OK)
    for key, value in changes.items():
        if value is ...:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def completion(**changes: Any) -> dict[str, Any]:
    body = dict(COMPLETION_OK)
    for key, value in changes.items():
        if value is ...:
            body.pop(key, None)
        else:
            body[key] = value
    return body


# (path, body, expected status, the field the error must name)
CASES: list[tuple[str, Any, int, str]] = [
    ("/v1/chat/completions", chat(messages=...), 400, "messages"),
    ("/v1/chat/completions", chat(messages=None), 400, "messages"),
    ("/v1/chat/completions", chat(messages=[]), 400, "messages"),
    ("/v1/chat/completions", chat(messages="hi"), 400, "messages"),
    ("/v1/chat/completions", chat(messages=["hi"]), 400, "messages[0]"),
    ("/v1/chat/completions", chat(messages=[{"content": "hi"}]), 400, "messages[0].role"),
    ("/v1/chat/completions", chat(messages=[{"role": "wizard", "content": "hi"}]), 400, "messages[0].role"),
    ("/v1/chat/completions", chat(messages=[{"role": "user"}]), 400, "messages[0].content"),
    ("/v1/chat/completions", chat(messages=[{"role": "user", "content": 5}]), 400, "messages[0].content"),
    ("/v1/chat/completions",
     chat(messages=[{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "image_url"}]}]),
     400, "messages[1].content[0].type"),
    ("/v1/chat/completions", chat(temperature=3), 400, "temperature"),
    ("/v1/chat/completions", chat(temperature=-0.1), 400, "temperature"),
    ("/v1/chat/completions", chat(temperature="hot"), 400, "temperature"),
    ("/v1/chat/completions", chat(temperature=[1]), 400, "temperature"),
    ("/v1/chat/completions", chat(top_p=1.5), 400, "top_p"),
    ("/v1/chat/completions", chat(top_k=-1), 400, "top_k"),
    ("/v1/chat/completions", chat(top_k=2.5), 400, "top_k"),
    ("/v1/chat/completions", chat(min_p=2), 400, "min_p"),
    ("/v1/chat/completions", chat(max_tokens=0), 400, "max_tokens"),
    ("/v1/chat/completions", chat(max_tokens="ten"), 400, "max_tokens"),
    ("/v1/chat/completions", chat(max_tokens=True), 400, "max_tokens"),
    ("/v1/chat/completions", chat(max_completion_tokens=-5), 400, "max_completion_tokens"),
    ("/v1/chat/completions", chat(seed="abc"), 400, "seed"),
    ("/v1/chat/completions", chat(stop=5), 400, "stop"),
    ("/v1/chat/completions", chat(stop=["ok", 3]), 400, "stop[1]"),
    ("/v1/chat/completions", chat(stop=[""]), 400, "stop[0]"),
    ("/v1/chat/completions", chat(presence_penalty=3), 400, "presence_penalty"),
    ("/v1/chat/completions", chat(frequency_penalty=-2.5), 400, "frequency_penalty"),
    ("/v1/chat/completions", chat(repeat_penalty=-1), 400, "repeat_penalty"),
    ("/v1/chat/completions", chat(logit_bias=[1, 2]), 400, "logit_bias"),
    ("/v1/chat/completions", chat(logit_bias={"abc": 1}), 400, "logit_bias.abc"),
    ("/v1/chat/completions", chat(logit_bias={"5": 500}), 400, "logit_bias.5"),
    ("/v1/chat/completions", chat(logit_bias={"99999999": 1}), 400, "logit_bias"),
    ("/v1/chat/completions", chat(stream="yes"), 400, "stream"),
    ("/v1/chat/completions", chat(stream_options={"include_usage": True}), 400, "stream_options"),
    ("/v1/chat/completions", chat(n=9), 400, "n"),
    ("/v1/chat/completions", chat(tools=[{"type": "function"}]), 400, "tools[0].function"),
    ("/v1/chat/completions", chat(response_format={"type": "json_schema"}), 400, "response_format.json_schema"),
    ("/v1/chat/completions", chat(model=5), 400, "model"),
    ("/v1/chat/completions", chat(reame=[]), 400, "reame"),
    ("/v1/chat/completions", chat(reame={"turbo": True}), 400, "reame.turbo"),
    ("/v1/completions", completion(prompt=...), 400, "prompt"),
    ("/v1/completions", completion(prompt=None), 400, "prompt"),
    ("/v1/completions", completion(prompt=[1, 2, 3]), 400, "prompt"),
    ("/v1/completions", completion(prompt=[]), 400, "prompt"),
    ("/v1/completions", completion(prompt={"text": "x"}), 400, "prompt"),
    ("/v1/completions", completion(max_tokens=-1), 400, "max_tokens"),
    ("/v1/completions", completion(best_of=3, n=4), 400, "best_of"),
    ("/v1/completions", completion(best_of=3, stream=True), 400, "best_of"),
    ("/v1/completions", completion(n=9), 400, "n"),
    ("/v1/completions", completion(logprobs=9), 400, "logprobs"),
]


@pytest.mark.parametrize(("path", "body", "status", "param"), CASES)
def test_malformed_request_names_the_field(server: Server, path: str, body: Any, status: int, param: str) -> None:
    got, _, reply = server.post_json(path, body)
    assert got == status, reply
    error = reply["error"]
    assert error["param"] == param, reply
    assert error["type"] == "invalid_request_error"
    assert isinstance(error["message"], str) and error["message"]
    assert "code" in error


@pytest.mark.parametrize(
    ("body", "param"),
    [(b"{not json", None), (b"[1, 2]", None), (b"", None), (b"\xff\xfe", None)],
)
def test_unparseable_bodies_are_400(server: Server, body: bytes, param: str | None) -> None:
    status, _, reply = server.request(
        "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    assert status == 400
    assert json.loads(reply)["error"]["type"] == "invalid_request_error"


def test_oversized_body_is_413_before_it_is_read(server: Server) -> None:
    # Announce 9 MiB but send only the start: the answer must come from the length alone.
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {9 * 1024 * 1024}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head + b'{"messages": [' + b" " * 65536)
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            data = sock.recv(65536)
            if not data:
                break
            reply += data
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.split()[1] == b"413", reply
    body = rest.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body)["error"]["type"] == "invalid_request_error"


def test_unknown_path_is_404_and_wrong_method_405(server: Server) -> None:
    status, _, reply = server.request("GET", "/v1/nothing-here")
    assert status == 404 and "error" in json.loads(reply)
    status, _, reply = server.request("GET", "/v1/chat/completions")
    assert status == 405 and "error" in json.loads(reply)


def test_unknown_openai_fields_are_ignored(server: Server) -> None:
    status, _, reply = server.post_json("/v1/chat/completions", chat(user="u1", store=False, metadata={"a": "b"}))
    assert status == 200, reply
    assert reply["object"] == "chat.completion"
