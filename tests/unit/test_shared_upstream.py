"""Upstream.ask against a real ROUTER over inproc://: stale replies dropped, the matching one returned, silence None."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from reame.shared import endpoints
from reame.shared import protocol as p
from reame.shared.upstream import Upstream, dealer, reply


@pytest.fixture
def router(context: zmq.Context[Any]) -> Iterator[tuple[str, zmq.Socket[Any]]]:
    address = f"inproc://peer-{uuid.uuid4().hex}"
    sock = context.socket(zmq.ROUTER)
    sock.bind(address)
    yield address, sock
    sock.close(linger=0)


def report(request_id: str, entries: int = 0) -> p.CacheReport:
    return p.CacheReport(request_id, entries, 0, 1, 0, 0, 0, 0, 0, 0)


def answering(sock: zmq.Socket[Any], answers: Any) -> threading.Thread:
    """A peer that reads one request and sends back, in order, the frames ``answers(request)`` lists."""

    def run() -> None:
        if sock.poll(60_000):
            identity, payload = sock.recv_multipart()
            for frames in answers(p.decode(payload)):
                sock.send_multipart([identity, *frames])

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_stale_and_unexpected_replies_are_dropped(context: zmq.Context[Any], router: tuple[str, Any]) -> None:
    address, sock = router

    def answers(request: p.Message) -> list[list[bytes]]:
        assert isinstance(request, p.CacheAdmin)
        return [
            [p.encode(report("an-earlier-question", entries=1))],  # stale: another request id
            [p.encode(p.CacheMiss(request.request_id))],  # the right id, not the kind asked for
            [b"not msgpack"],  # undecodable
            [b"two", b"frames"],
            [p.encode(report(request.request_id, entries=7))],
        ]

    peer = answering(sock, answers)
    try:
        found = Upstream(context).ask(
            address, p.CacheAdmin("q1", p.CacheCommand.STATS), reply(p.CacheReport, "q1"), 60.0
        )
    finally:
        peer.join()
    assert found is not None and (found.request_id, found.entries) == ("q1", 7)


def test_a_reply_without_request_id_matches_by_kind(context: zmq.Context[Any], router: tuple[str, Any]) -> None:
    address, sock = router
    status = p.Status(workers=2, idle_workers=1, queued=0, running=1)
    peer = answering(sock, lambda _: [[p.encode(p.Heartbeat())], [p.encode(status)]])
    try:
        found = Upstream(context).ask(address, p.StatusQuery(), reply(p.Status), 60.0)
    finally:
        peer.join()
    assert found == status


def test_silence_is_none_after_the_timeout(context: zmq.Context[Any], router: tuple[str, Any]) -> None:
    address, sock = router
    peer = answering(sock, lambda request: [[p.encode(report("someone-else"))]])
    try:
        assert Upstream(context).ask(
            address, p.CacheAdmin("q2", p.CacheCommand.STATS), reply(p.CacheReport, "q2"), 0.05
        ) is None
    finally:
        peer.join()


def test_nobody_listening_at_an_ipc_address_is_none_at_once(context: zmq.Context[Any], tmp_path: Path) -> None:
    upstream = Upstream(context)
    stats = p.CacheAdmin("q3", p.CacheCommand.STATS)
    assert upstream.ask(f"ipc://{tmp_path}/none.ipc", stats, reply(p.CacheReport), 60.0, skip_absent=True) is None


def test_a_bad_address_is_none(context: zmq.Context[Any]) -> None:
    stats = p.CacheAdmin("q4", p.CacheCommand.STATS)
    assert Upstream(context).ask("nonsense://here", stats, reply(p.CacheReport), 60.0) is None


def test_tell_sends_one_message(context: zmq.Context[Any], router: tuple[str, Any]) -> None:
    address, sock = router
    Upstream(context).tell(address, p.AnswerPut("put-1", "key", b"data"), linger_ms=1000)
    assert sock.poll(60_000)
    _, payload = sock.recv_multipart()
    assert p.decode(payload) == p.AnswerPut("put-1", "key", b"data")


def test_dealer_lingers_zero_and_is_a_curve_client_on_tcp(context: zmq.Context[Any]) -> None:
    server_public, _ = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    keys = endpoints.LinkKeys(server_public=server_public, client_public=client_public, client_secret=client_secret)
    plain = dealer(context, f"inproc://plain-{uuid.uuid4().hex}", keys)
    curve = dealer(context, "tcp://127.0.0.1:9", keys)
    try:
        assert plain.getsockopt(zmq.LINGER) == 0 and plain.getsockopt(zmq.MECHANISM) == zmq.NULL
        assert curve.getsockopt(zmq.LINGER) == 0 and curve.getsockopt(zmq.MECHANISM) == zmq.CURVE
        assert curve.getsockopt(zmq.CURVE_SERVER) == 0  # the client side
    finally:
        plain.close(linger=0)
        curve.close(linger=0)
