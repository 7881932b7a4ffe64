"""Fault suite, scenario 8 (HTTP): a hypothesis fuzzer against every endpoint of /openapi.json.

Malformed JSON, wrong types, nulls, huge numbers, deep nesting, invalid UTF-8, huge strings
and bodies: never a 5xx, and every process still serves afterwards. (schemathesis is not
used: it is not installed here; the endpoints come from the same document it would read.)
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.faults import PROMPTS, Tally, answer, scale
from tests.harness import Server, cmdline, start_server

pytestmark = [pytest.mark.integration, pytest.mark.faults]

EXAMPLES = scale(150, 3000)
TALLY = Tally("8. HTTP fuzzing (hypothesis) of every endpoint")
STATUSES: dict[int, int] = {}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, list[tuple[str, str]], list[int]]]:
    server = start_server(tmp_path_factory.mktemp("fuzz"), server_request_timeout="30")
    status, _, body = server.request("GET", "/openapi.json")
    assert status == 200
    document = json.loads(body)
    model_id = server.client().models.list().data[0].id
    routes = [(method.upper(), path.replace("{model_id}", model_id)) for path, item in document["paths"].items()
              for method in item]
    yield server, routes, sorted(server.children())
    left = server.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(p) for p in left]}"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False) | st.text(max_size=40) | st.sampled_from(["user", "system", "m", "", "\u0000"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ["model", "messages", "prompt", "stream", "stream_options", "temperature", "top_p", "max_tokens", "seed",
          "stop", "logit_bias", "n", "logprobs", "top_logprobs", "response_format", "reame", "top_k", "min_p",
          "presence_penalty", "frequency_penalty", "repeat_penalty", "max_completion_tokens", "tools"]
BASE: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["field", "json", "bytes", "deep", "hugenum", "badutf8", "hugestring", "huge"]))
    if kind == "field":  # a valid request with one or two fields replaced
        body = dict(BASE)
        for name in draw(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=2)):
            body[name] = draw(json_values)
        return json.dumps(body).encode()
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "deep":
        depth = draw(st.sampled_from([100, 1000, 100_000]))
        return b'{"messages":' + b"[" * depth + b"]" * depth + b"}"
    if kind == "hugenum":
        return b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"temperature":1e999,' \
               b'"seed":' + b"9" * draw(st.sampled_from([20, 400, 5000])) + b"}"
    if kind == "badutf8":
        return b'{"model":"m","messages":[{"role":"user","content":"\xff\xfe\xc3\x28 \xed\xa0\x80"}],"max_tokens":1}'
    if kind == "hugestring":
        return json.dumps({**BASE, "messages": [{"role": "user", "content": "z" * draw(
            st.sampled_from([10_000, 1_000_000]))}]}).encode()
    return b'{"model":"m","prompt":"' + b"y" * (9 * 1024 * 1024) + b'"}'  # over server.max_body_bytes


def send(server: Server, method: str, path: str, body: bytes | None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
        response = conn.getresponse()
        response.read()
        return response.status
    except (ConnectionResetError, BrokenPipeError):
        return 413  # the gateway closed an oversized upload before reading it all: a refusal, not a crash
    finally:
        conn.close()


def test_fuzzed_requests_never_get_a_5xx(fuzzed: tuple[Server, list[tuple[str, str]], list[int]]) -> None:
    server, routes, pids = fuzzed
    reference = answer(server, PROMPTS[0])

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    # The POST routes, which read a body, three times as often as the others.
    @given(route=st.sampled_from(routes + 2 * [r for r in routes if r[0] == "POST"]), body=bodies())
    def probe(route: tuple[str, str], body: bytes) -> None:
        method, path = route
        status = send(server, method, path, body if method == "POST" else None)
        TALLY.count(sent=1, faults=1, answered=int(status < 400), errors=int(400 <= status < 500))
        STATUSES[status] = STATUSES.get(status, 0) + 1
        assert status < 500, (method, path, status, body[:200])

    probe()
    got = answer(server, PROMPTS[0])
    TALLY.count(wrong=int(got != reference))
    TALLY.notes.update(statuses=dict(sorted(STATUSES.items())), routes=len(routes))
    TALLY.write()
    assert server.ready() is not None
    assert sorted(server.children()) == pids, "a process died or restarted"
    assert got == reference


def test_openapi_document_names_every_route(fuzzed: tuple[Server, list[tuple[str, str]], list[int]]) -> None:
    server, routes, _ = fuzzed
    assert ("POST", "/v1/chat/completions") in routes and ("GET", "/health") in routes
    for method, path in routes:
        if method == "GET":
            assert send(server, method, path, None) == 200, path

