"""The worker's link thread against a fake dispatcher (a ROUTER in the same process)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest
import zmq

from reame.shared import protocol as p
from reame.worker.link import Link
from tests.waiting import PATIENCE_S

HELLO = p.Ready(worker_id="w0-1", pid=1, model="m", n_ctx=128)
WAIT_S = PATIENCE_S  # upper bound for anything to arrive; tests never sleep for it
_ids = itertools.count()


class FakeDispatcher:
    """A ROUTER the link connects to; every worker message is read through it."""

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], address: str) -> None:
        self.sock = context.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(address)

    def recv(self, skip_heartbeats: bool = True) -> tuple[bytes, p.Message]:
        deadline = time.monotonic() + WAIT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000)):
                raise AssertionError("nothing arrived from the worker")
            identity, payload = self.sock.recv_multipart()
            message = p.decode(payload)
            if not (skip_heartbeats and isinstance(message, p.Heartbeat)):
                return identity, message

    def quiet(self, seconds: float = 0.1) -> list[p.Message]:
        """Return whatever non-heartbeat messages arrive within ``seconds``."""
        got: list[p.Message] = []
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.sock.poll(int(left * 1000) + 1):
                message = p.decode(self.sock.recv_multipart()[1])
                if not isinstance(message, p.Heartbeat):
                    got.append(message)
        return got

    def send(self, identity: bytes, message: p.Message) -> None:
        self.sock.send_multipart([identity, p.encode(message)])


@pytest.fixture
def context() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    yield ctx
    ctx.term()


def make(
    context: zmq.Context[zmq.Socket[bytes]], interval: float = 30.0, liveness: int = 3
) -> tuple[FakeDispatcher, Link]:
    address = f"inproc://test-dispatcher-{next(_ids)}"
    dispatcher = FakeDispatcher(context, address)
    link = Link(context, address, HELLO, interval=interval, liveness=liveness)
    link.start()
    return dispatcher, link


@pytest.fixture
def pair(context: zmq.Context[zmq.Socket[bytes]]) -> Iterator[tuple[FakeDispatcher, Link, bytes]]:
    dispatcher, link = make(context)
    identity, ready = dispatcher.recv()
    assert ready == HELLO
    yield dispatcher, link, identity
    link.close()
    dispatcher.sock.close(0)


def generate(request_id: str) -> p.Generate:
    return p.Generate(request_id, p.SamplingParams(), deadline=time.time() + 60, prompt="hi")


def test_request_reaches_engine_and_replies_reach_dispatcher(pair: tuple[FakeDispatcher, Link, bytes]) -> None:
    dispatcher, link, identity = pair
    dispatcher.send(identity, generate("a"))
    job = link.next_job(WAIT_S)
    assert job is not None and job.request.request_id == "a"
    assert not job.cancel.is_set()
    link.send(p.Delta("a", "Hel", 1))
    link.send(p.Done("a", p.FinishReason.STOP, 1, 1))
    assert dispatcher.recv() == (identity, p.Delta("a", "Hel", 1))
    assert dispatcher.recv() == (identity, p.Done("a", p.FinishReason.STOP, 1, 1))


def test_cancel_sets_the_current_requests_event_only(pair: tuple[FakeDispatcher, Link, bytes]) -> None:
    dispatcher, link, identity = pair
    dispatcher.send(identity, generate("a"))
    job = link.next_job(WAIT_S)
    assert job is not None
    dispatcher.send(identity, p.Cancel("someone-else"))
    dispatcher.send(identity, p.Heartbeat())  # processed after the cancel: a sync point
    assert not job.cancel.wait(0.2)
    dispatcher.send(identity, p.Cancel("a"))
    assert job.cancel.wait(WAIT_S)


def test_generate_while_busy_is_refused(pair: tuple[FakeDispatcher, Link, bytes]) -> None:
    dispatcher, link, identity = pair
    dispatcher.send(identity, generate("a"))
    dispatcher.send(identity, generate("b"))
    _, reply = dispatcher.recv()
    assert isinstance(reply, p.Error)
    assert (reply.request_id, reply.code) == ("b", p.ErrorCode.INTERNAL)
    first = link.next_job(WAIT_S)
    assert first is not None and first.request.request_id == "a"
    assert link.next_job(0.05) is None


def test_slot_is_free_as_soon_as_the_last_message_leaves(pair: tuple[FakeDispatcher, Link, bytes]) -> None:
    dispatcher, link, identity = pair
    dispatcher.send(identity, generate("a"))
    assert link.next_job(WAIT_S) is not None
    link.send(p.Error("a", p.ErrorCode.CANCELLED, "gone"))
    assert dispatcher.recv()[1] == p.Error("a", p.ErrorCode.CANCELLED, "gone")
    # The dispatcher sends the next request the moment it sees the end of the last.
    dispatcher.send(identity, generate("b"))
    job = link.next_job(WAIT_S)
    assert job is not None and job.request.request_id == "b"
    assert dispatcher.quiet() == []


def test_disconnect_while_idle_sends_ready_again(pair: tuple[FakeDispatcher, Link, bytes]) -> None:
    dispatcher, _link, identity = pair
    dispatcher.send(identity, p.Disconnect())
    assert dispatcher.recv() == (identity, HELLO)


def test_disconnect_while_busy_abandons_request_then_sends_ready(
    pair: tuple[FakeDispatcher, Link, bytes],
) -> None:
    dispatcher, link, identity = pair
    dispatcher.send(identity, generate("a"))
    job = link.next_job(WAIT_S)
    assert job is not None
    dispatcher.send(identity, p.Disconnect())
    assert job.cancel.wait(WAIT_S)
    link.send(p.Delta("a", "late", 1))
    assert dispatcher.quiet() == []  # no Ready while the old request still runs, no stale output
    link.send(p.Error("a", p.ErrorCode.CANCELLED, "cancelled"))
    assert dispatcher.recv() == (identity, HELLO)
    assert dispatcher.quiet() == []


def test_bad_payload_is_dropped_and_the_link_keeps_working(pair: tuple[FakeDispatcher, Link, bytes]) -> None:
    dispatcher, link, identity = pair
    dispatcher.sock.send_multipart([identity, b"\x93garbage"])
    dispatcher.send(identity, p.Status(1, 1, 0, 0))  # valid, but not for workers
    dispatcher.send(identity, generate("a"))
    job = link.next_job(WAIT_S)
    assert job is not None and job.request.request_id == "a"
    assert link.alive


def test_close_sends_disconnect_after_pending_replies(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    dispatcher, link = make(context)
    identity, _ = dispatcher.recv()
    dispatcher.send(identity, generate("a"))
    assert link.next_job(WAIT_S) is not None
    link.send(p.Error("a", p.ErrorCode.SHUTTING_DOWN, "bye"))
    link.close()
    assert dispatcher.recv() == (identity, p.Error("a", p.ErrorCode.SHUTTING_DOWN, "bye"))
    assert dispatcher.recv() == (identity, p.Disconnect())
    assert not link.alive
    dispatcher.sock.close(0)


def test_heartbeats_are_sent_every_interval(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    dispatcher, link = make(context, interval=0.02, liveness=1000)
    try:
        identity, ready = dispatcher.recv()
        assert ready == HELLO
        beats = 0
        while beats < 3:
            sender, message = dispatcher.recv(skip_heartbeats=False)
            assert sender == identity
            assert isinstance(message, p.Heartbeat)
            beats += 1
    finally:
        link.close()
        dispatcher.sock.close(0)


def test_silent_dispatcher_causes_reconnect_and_new_ready(context: zmq.Context[zmq.Socket[bytes]]) -> None:
    dispatcher, link = make(context, interval=0.02, liveness=2)
    try:
        first, ready = dispatcher.recv()
        assert ready == HELLO
        # The fake dispatcher never answers, so the link gives up on this socket, saying so
        # on it: a dispatcher that hears after all must not keep that identity as a worker.
        farewell = (first, p.Disconnect())
        seen: list[tuple[bytes, p.Message]] = []
        while farewell not in seen or not any(sender != first for sender, _ in seen):
            seen.append(dispatcher.recv())
        ready = next(message for sender, message in seen if sender != first)
        assert ready == HELLO  # a new socket, so a new identity at the ROUTER
        assert seen.count(farewell) == 1
        assert link.alive
    finally:
        link.close()
        dispatcher.sock.close(0)
