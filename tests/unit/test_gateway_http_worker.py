"""The hardened gthread worker's pure parts, log escaping and unencodable errors (issue #12, item 3)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from gunicorn.http import errors as http_errors

from reame.gateway.api.responses import dumps
from reame.gateway.http import http_worker
from reame.gateway.http.errors import APIError
from reame.gateway.http.requestlog import RequestLog, log_safe


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def test_error_answers_are_whole_http_messages_in_openai_shape() -> None:
    refusal = APIError(429, "slow down", type="overloaded_error", code="too_many_connections", retry=True)
    answer = http_worker.error_response(refusal, "Too Many Requests", retry_after=2)
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 429 Too Many Requests"
    assert {"Connection: close", "Content-Type: application/json", "Retry-After: 2",
            f"Content-Length: {len(body)}"} <= set(lines[1:])
    request_ids = [line.split(": ", 1)[1] for line in lines if line.startswith("X-Request-Id: ")]
    assert len(request_ids) == 1 and request_ids[0].startswith("req-")  # as every answer of the app has one
    assert json.loads(body) == {"error": {"message": "slow down", "type": "overloaded_error", "param": None,
                                          "code": "too_many_connections"}}


@pytest.mark.parametrize(("error", "status"), [
    (http_errors.LimitRequestLine(8192, 4094), 414),
    (http_errors.LimitRequestHeaders("too many"), 431),
    (http_errors.InvalidRequestLine("GARBAGE"), 400),
    (http_errors.InvalidHeader("CONTENT-LENGTH"), 400),
    (http_errors.InvalidChunkSize(b"ZZ"), 400),
    (http_errors.UnsupportedTransferCoding("gzip"), 400),  # gunicorn says 501: it is the client's doing
])
def test_errors_before_the_app_are_4xx(error: Exception, status: int) -> None:
    assert http_worker.parse_error(error)[0] == status


def test_a_blocking_client_socket_waits_read_timeout_at_most(
    pair: tuple[socket.socket, socket.socket], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, client = pair
    server.__class__ = http_worker._TimedSocket
    monkeypatch.setattr(http_worker._TimedSocket, "read_timeout", 0.05)
    server.setblocking(True)
    assert server.gettimeout() == 0.05
    client.sendall(b"GET / HTTP/1.1\r\n")
    assert server.recv(100) == b"GET / HTTP/1.1\r\n"
    with pytest.raises(http_worker.ReadTimeout):  # gunicorn's NoMoreData: dropped quietly
        server.recv(100)
    assert server in http_worker._STALLED  # no keep-alive drain: the client had its chance
    with pytest.raises(BlockingIOError):  # a peek for a hang-up does not wait for the timeout
        server.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    assert server.gettimeout() == 0.05
    server.setblocking(False)
    assert server.gettimeout() == 0.0


def test_drain_reads_without_waiting(pair: tuple[socket.socket, socket.socket]) -> None:
    server, client = pair
    client.sendall(b"x" * 1000)
    assert not http_worker._drain(server)
    client.shutdown(socket.SHUT_WR)
    assert http_worker._drain(server)


def test_log_fields_are_escaped() -> None:
    record = RequestLog("GET", "/v1/models/x\nFORGED\x00 \u2028é")
    assert record.path == "/v1/models/x\\x0aFORGED\\x00 \\u2028é"
    assert log_safe("\x7f\x9b\ud800") == "\\x7f\\x9b\\ud800"
    assert log_safe("/v1/chat/completions") == "/v1/chat/completions"


def test_an_error_quoting_a_lone_surrogate_can_be_sent() -> None:
    error = APIError(400, "unknown reame option '\ud800'", param="logit_bias.\ud800")
    body = json.loads(dumps({"error": error.to_dict()}))
    assert body["error"]["param"] == "logit_bias.\\ud800"
    assert body["error"]["message"] == "unknown reame option '\\ud800'"


def test_an_address_gets_its_share_and_the_last_quarter_of_threads_is_kept_for_new_addresses() -> None:
    # 32 threads, 16 per address: the first connections of an address always fit ...
    assert http_worker.admits(0, 31, 16, 32)
    # ... more of an address only while three quarters (24) are not in use,
    assert http_worker.admits(5, 23, 16, 32)
    assert not http_worker.admits(5, 24, 16, 32)
    # ... and never beyond its share.
    assert not http_worker.admits(16, 0, 16, 32)
    # A pool of one thread keeps nothing back from a first connection.
    assert http_worker.admits(0, 0, 1, 1)
    assert not http_worker.admits(1, 0, 1, 1)
