"""Hostile input through a real server (issue #12, "What was seen", item 3).

Each test sends the issue's reproducer and asserts a 4xx in OpenAI's JSON shape (or
a normal answer), and that GET /health keeps being answered meanwhile. Where speed
matters, the hostile request is compared with an ordinary one of the same size in
the same test, as a ratio with a generous factor: no test depends on the machine.
"""

from __future__ import annotations

import concurrent.futures
import functools
import gzip
import json
import select
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Server, start_server

pytestmark = pytest.mark.integration

READ_TIMEOUT_S = 2.0
READ_DEADLINE_S = 5.0
PER_CLIENT = 4
ATTACKER = "127.0.0.2"  # another loopback address: the slow clients are not the test's own address
SLOW = (
    "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    "Content-Length: 100\r\n\r\n{\"mo"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(
        tmp_path_factory.mktemp("hostile"), workers=1,
        server_read_timeout=str(READ_TIMEOUT_S), server_read_deadline=str(READ_DEADLINE_S),
        server_max_connections_per_client=str(PER_CLIENT),
    )
    yield running
    assert not running.stop()


def raw(server: Server, data: bytes, *, source: str = "127.0.0.1", close_write: bool = False) -> bytes:
    """Send ``data`` on a new connection; return everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60, source_address=(source, 0)) as sock:
        sock.sendall(data)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        return _read_all(sock)


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def parse(answer: bytes) -> tuple[int, dict[str, str], Any]:
    """Return the status, headers and JSON body of a raw HTTP answer (the first one)."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.title(): value for name, value in (line.split(": ", 1) for line in lines[1:] if ": " in line)}
    length = int(headers.get("Content-Length", len(body)))
    return int(lines[0].split()[1]), headers, json.loads(body[:length])


def assert_openai_error(answer: bytes, status: int | tuple[int, ...]) -> dict[str, Any]:
    code, headers, body = parse(answer)
    assert code in (status if isinstance(status, tuple) else (status,)), answer[:300]
    assert 400 <= code < 500
    assert headers.get("Content-Type", "").startswith("application/json")
    assert headers.get("X-Request-Id")  # refused connections and gunicorn's errors too
    assert set(body["error"]) >= {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


def health_ok(server: Server) -> bool:
    # Connection: close, as a probe does: a kept-alive connection the client then closes is
    # read once more in a thread, and asked again and again these took the client's share
    # of threads (PER_CLIENT), so a probe got 429 now and then (issue #30: probes apart).
    status, _, body = server.request("GET", "/health", headers={"Connection": "close"})
    return status == 200 and json.loads(body) == {"status": "ok"}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def while_health_answers(server: Server, work: Callable[[], Any]) -> Any:
    """Run ``work`` in a thread while GET /health is asked again and again; every ask must be answered."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(work)
        answered = 0
        while not future.done() or answered == 0:
            assert health_ok(server)
            answered += 1
        return future.result()


# -- slowloris -------------------------------------------------------------------------


def test_slow_clients_cannot_hold_the_gateway(server: Server) -> None:
    """32 connections sending headers with Content-Length: 100 and 4 bytes: /health still answers."""
    slow = []
    for _ in range(32):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=60, source_address=(ATTACKER, 0))
        sock.sendall(SLOW.encode())
        slow.append(sock)
    try:
        for _ in range(5):
            assert health_ok(server)
        statuses = []
        for sock in slow:
            answer = _read_all(sock)  # the server ends every one of them: refused, or timed out
            statuses.append(assert_openai_error(answer, (408, 429))["code"])
    finally:
        for sock in slow:
            sock.close()
    assert statuses.count("too_many_connections") >= 32 - PER_CLIENT * 2
    assert "request_timeout" in statuses  # the ones admitted waited read_timeout, no longer
    assert health_ok(server)


def test_headers_that_never_end_time_out(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=60, source_address=(ATTACKER, 0)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert _read_all(sock) == b""  # closed after read_timeout, not held
    assert health_ok(server)


def trickle(server: Server, head: bytes, drip: bytes) -> tuple[bytes, int]:
    """Send ``head``, then ``drip`` every READ_TIMEOUT_S / 2 until the server answers or closes.

    Return what it answered and how many drips it took: each comes well within
    read_timeout, so only the whole request's deadline can end the connection.
    """
    with socket.create_connection(("127.0.0.1", server.port), timeout=60, source_address=(ATTACKER, 0)) as sock:
        sock.sendall(head)
        # Far more drips than the deadline has room for, so the test ends either way.
        for drips in range(int(10 * READ_DEADLINE_S / READ_TIMEOUT_S)):
            readable, _, _ = select.select([sock], [], [], READ_TIMEOUT_S / 2)
            if readable:
                return _read_all(sock), drips
            try:
                sock.sendall(drip)
            except OSError:  # closed while we wrote
                return _read_all(sock), drips
        return b"", -1


def test_a_body_that_lies_about_its_length_is_408_at_the_deadline(server: Server) -> None:
    """Issue #30, item 2: Content-Length larger than what is sent was answered 408 only after 20 s."""
    answer, drips = trickle(server, SLOW.encode(), b" ")  # 100 announced; 4 sent, then a space now and then
    assert drips >= 0, "the connection was never ended"
    assert assert_openai_error(answer, 408)["code"] == "request_timeout"


def test_headers_trickled_line_by_line_end_at_the_deadline(server: Server) -> None:
    """Issue #30, item 1: one header line every 3 s kept a connection (and its thread) for ever."""
    answer, drips = trickle(server, b"GET /health HTTP/1.1\r\nHost: x\r\n", b"X-Drip: 1\r\n")
    assert drips >= 0, "the connection was never ended"
    assert b"200 OK" not in answer
    assert health_ok(server)


# -- errors before the app, and on malformed bodies ---------------------------------------------


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n", 431),
    (b"GARBAGE\r\n\r\n", 400),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nabc\r\n0\r\n\r\n",
     400),
])
def test_errors_before_the_app_are_openai_json(server: Server, request_bytes: bytes, status: int) -> None:
    assert_openai_error(raw(server, request_bytes), status)


def test_a_truncated_chunked_body_is_a_400(server: Server) -> None:
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"mo"
    assert_openai_error(raw(server, request, close_write=True), 400)


@pytest.mark.parametrize("field", ['"logit_bias": {"\\ud800": 1}', '"reame": {"\\ud800": 1}'])
def test_a_lone_surrogate_in_a_key_is_a_400(server: Server, field: str) -> None:
    body = ('{"model": "m", "messages": [{"role": "user", "content": "hi"}], ' + field + "}").encode()
    logged = server.log().count("POST /v1/chat/completions 400 ")
    status, headers, answer = server.request(
        "POST", "/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    assert status == 400 and headers["Content-Type"].startswith("application/json")
    assert "\\ud800" in json.loads(answer)["error"]["param"]
    # In the request log, as every request (it was gunicorn's HTML 500, unlogged).
    assert server.log().count("POST /v1/chat/completions 400 ") == logged + 1


# -- the request log ----------------------------------------------------------------------------


def test_log_fields_are_escaped(server: Server) -> None:
    for path in ("/v1/models/x%0AFORGED", "/v1/models/y%00z"):
        status, _, _ = server.request("GET", path)
        assert status == 404
    log = (server.tmp / "serve.log").read_bytes()
    assert b"\x00" not in log
    assert not any(line.startswith(b"FORGED") for line in log.splitlines())
    assert b"x\\x0aFORGED" in log and b"y\\x00z" in log


# -- bounds before any expensive work -------------------------------------------------------------


def post_chat(server: Server, messages: list[dict[str, str]], **fields: Any) -> tuple[int, Any]:
    body = json.dumps({"model": "m", "messages": messages, **fields}).encode()
    status, _, answer = server.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    return status, json.loads(answer)


def test_200k_empty_messages_are_refused_at_once(server: Server) -> None:
    messages = [{"role": "user", "content": ""}] * 200_000  # ~6 MB
    # The ordinary request of the same size: refused for "n" right after the JSON is read.
    t_ordinary, (status, _) = timed(lambda: post_chat(server, messages, n=2))
    assert status == 400
    t_hostile, (status, answer) = timed(lambda: while_health_answers(server, lambda: post_chat(server, messages)))
    assert status == 400 and answer["error"]["param"] == "messages"
    assert "at most 1024 messages" in answer["error"]["message"]
    assert t_hostile < 10 * t_ordinary  # generous: the health checks run beside it


def test_a_7_5_mb_chat_body_is_refused_before_compressing(server: Server) -> None:
    text = "The keeper climbs the stairs of the lighthouse every evening, and lights the lamp. " * 90_000
    messages = [{"role": "user", "content": text}]  # 7.5 MB, compressed in the default mode
    t_ordinary, (status, _) = timed(lambda: post_chat(server, messages, n=2))
    assert status == 400
    post_chat(server, messages)  # the first one loads the vocabulary
    t_hostile, (status, answer) = timed(lambda: post_chat(server, messages))
    assert status == 400 and answer["error"]["code"] == "context_length_exceeded"
    assert answer["error"]["param"] == "messages"
    assert t_hostile < 5 * t_ordinary


# -- special tokens ----------------------------------------------------------------------------------


def test_special_token_text_in_a_message_is_plain_text(server: Server) -> None:
    def prompt_tokens(content: str) -> int:
        status, answer = post_chat(server, [{"role": "user", "content": content}], max_tokens=1, temperature=0)
        assert status == 200, answer
        tokens: int = answer["usage"]["prompt_tokens"]
        return tokens

    assert prompt_tokens("<|im_end|>") > prompt_tokens("hi") + 2  # no longer one control token


def test_completions_of_special_token_text_cost_as_much_as_ordinary_text(server: Server) -> None:
    """"<|im_end|>" * N took 0.9 s at 200 KB, 3.4 s at 400 KB and 13.6 s at 800 KB (quadratic)."""
    def complete(prompt: str) -> float:
        body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 1}).encode()
        took, (status, _, answer) = timed(lambda: server.request("POST", "/v1/completions", body))
        assert status == 400 and json.loads(answer)["error"]["code"] == "context_length_exceeded"
        return took

    sizes = (200_000, 400_000, 800_000)
    # The better of two tries each: a busy machine's stalls are not the server's cost.
    ordinary = sum(min(complete("hello world, " * (size // 13)) for _ in range(2)) for size in sizes)
    hostile = sum(min(complete("<|im_end|>" * (size // 10)) for _ in range(2)) for size in sizes)
    assert hostile < 5 * ordinary, (hostile, ordinary)  # quadratic was 15x ordinary text at 800 KB
    while_health_answers(server, functools.partial(complete, "<|im_end|>" * 40_000))


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": ""}, "prompt"),
    ({"messages": [{"role": "system", "content": ""}]}, "messages"),
])
def test_a_warm_with_nothing_to_read_is_a_400_naming_it(server: Server, body: dict[str, Any], param: str) -> None:
    status, _, answer = server.post_json("/v1/cache/warm", body)  # was 200 "cached": true, with nothing read
    assert status == 400 and answer["error"]["param"] == param, answer


def encoded_chat(server: Server, body: bytes, encoding: str) -> tuple[int, dict[str, Any]]:
    status, _, answer = server.request("POST", "/v1/chat/completions", body, {
        "Content-Type": "application/json", "Content-Encoding": encoding,
    })
    return status, json.loads(answer)


def test_a_gzip_or_deflate_body_is_read(server: Server) -> None:
    """Issue #30, item 5: gzip bodies were read as JSON and failed as "invalid_json"."""
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 2}).encode()
    for encoding, data in (("gzip", gzip.compress(chat)), ("deflate", zlib.compress(chat))):
        status, answer = encoded_chat(server, data, encoding)
        assert status == 200 and answer["usage"]["completion_tokens"] >= 1, (encoding, answer)


def test_a_body_that_inflates_past_the_limit_or_an_unknown_encoding_is_refused(server: Server) -> None:
    bomb = gzip.compress(b" " * 100_000_000)  # about 100 KB on the wire, 100 MB inflated
    status, answer = encoded_chat(server, bomb, "gzip")
    assert status == 413 and answer["error"]["code"] == "request_too_large", answer
    status, answer = encoded_chat(server, b"{}", "br")
    assert status == 415 and "'br'" in answer["error"]["message"], answer
    assert health_ok(server)


def test_the_server_still_serves(server: Server) -> None:
    status, answer = post_chat(server, [{"role": "user", "content": "Say hi."}], max_tokens=4)
    assert status == 200 and answer["choices"][0]["message"]["content"] is not None
    assert health_ok(server)


def test_slow_clients_from_several_addresses_leave_threads_for_probes_and_others(tmp_path: Path) -> None:
    """Issue #30, item 1: 48 slow connections from three addresses took every thread; /health got no byte.

    A small pool (8 threads, 4 per address) and long timeouts: the slow connections hold
    their threads for the whole test, so only the admission rules can let /health through.
    """
    pool = start_server(
        tmp_path, workers=1, server_gateway_threads="8", server_max_connections_per_client="4",
        server_read_timeout="60", server_read_deadline="120",
    )
    slow: list[socket.socket] = []
    try:
        for address in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):
            for _ in range(4):
                sock = socket.create_connection(("127.0.0.1", pool.port), timeout=60, source_address=(address, 0))
                sock.sendall(SLOW.encode())
                slow.append(sock)
        for source in ("127.0.0.5", "127.0.0.2", "127.0.0.1"):  # a fresh address, an attacker's, loopback
            for path in ("/health", "/ready"):
                answer = probe(pool.port, path, source)
                assert answer.startswith(b"HTTP/1.1 200"), (source, path, answer[:200])
        # The attackers got 429s beyond the reserve, not threads: 8 - 8 // 4 = 6 threads for
        # addresses with a connection in service, and one more for each address's first.
        refused = sum(b" 429 " in _read_all(sock)[:20] for sock in slow if _closed_soon(sock))
        assert refused >= 12 - (6 + 3), refused
    finally:
        for sock in slow:
            sock.close()
        assert not pool.stop()


def probe(port: int, path: str, source: str) -> bytes:
    """GET ``path`` on a fresh connection from ``source``; the answer, or b"" if none came in 30 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0)) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        try:
            return _read_all(sock)
        except TimeoutError:
            return b""


def _closed_soon(sock: socket.socket) -> bool:
    """Tell whether the server has answered or closed ``sock`` (a refused one is, at once)."""
    readable, _, _ = select.select([sock], [], [], 0.5)
    return bool(readable)
