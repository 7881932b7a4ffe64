"""Busy workers borrow the threads of idle workers on their host, and give them back."""

from __future__ import annotations

from reame.dispatcher.scheduler import Scheduler
from reame.dispatcher.state import Dest, Send
from reame.dispatcher.threads import Seat, allot
from reame.shared import protocol as p

T0 = 1000.0
GW = b"gw"
W1, W2, W3 = b"w-1", b"w-2", b"w-3"


def test_a_lone_busy_worker_gets_every_thread_of_its_host() -> None:
    seats = [Seat(W1, "a", 1, True), Seat(W2, "a", 1, False), Seat(W3, "a", 2, False)]
    assert allot(seats) == {W1: 4}


def test_busy_workers_share_what_is_idle_in_a_fixed_order() -> None:
    seats = [Seat(W2, "a", 1, True), Seat(W1, "a", 1, True), Seat(W3, "a", 1, False)]
    assert allot(seats) == {W1: 2, W2: 1}
    assert allot([Seat(W1, "a", 1, True), Seat(W2, "a", 1, True)]) == {W1: 1, W2: 1}


def test_threads_are_lent_only_within_a_host() -> None:
    seats = [Seat(W1, "a", 1, True), Seat(W2, "b", 1, False), Seat(W3, "b", 1, True)]
    assert allot(seats) == {W1: 1, W3: 2}
    assert allot([Seat(W1, "a", 1, False)]) == {}


def generate(request_id: str) -> p.Generate:
    return p.Generate(request_id=request_id, sampling=p.SamplingParams(), deadline=T0 + 600, prompt=request_id)


def done(request_id: str) -> p.Done:
    return p.Done(request_id=request_id, finish_reason=p.FinishReason.STOP, prompt_tokens=1, completion_tokens=1)


def to_worker(identity: bytes, message: p.Message) -> Send:
    return Send(Dest.WORKER, identity, message)


def attached(lend: bool) -> Scheduler:
    sched = Scheduler(queue_size=4, now=T0, lend_threads=lend)
    for identity in (W1, W2):
        ready = p.Ready(worker_id=identity.decode(), pid=1, model="m", n_ctx=4096, threads=1, host="vm")
        sched.worker_message(identity, ready, T0)
    return sched


def test_the_share_goes_out_before_the_request_and_comes_back_when_another_arrives() -> None:
    sched = attached(lend=True)
    assert sched.client_message(GW, generate("r1"), T0) == [
        to_worker(W1, p.Threads(threads=2)), to_worker(W1, generate("r1")),
    ]
    assert sched.client_message(GW, generate("r2"), T0) == [
        to_worker(W1, p.Threads(threads=1)), to_worker(W2, generate("r2")),
    ]
    sends = sched.worker_message(W1, done("r1"), T0 + 1)
    assert sends == [Send(Dest.CLIENT, GW, done("r1")), to_worker(W2, p.Threads(threads=2))]
    # W1 was told 1 last; it is idle now, and told again only when its share changes.
    assert sched.client_message(GW, generate("r3"), T0 + 1) == [
        to_worker(W2, p.Threads(threads=1)), to_worker(W1, generate("r3")),
    ]


def test_a_lost_worker_lends_nothing_more() -> None:
    sched = attached(lend=True)
    sched.client_message(GW, generate("r1"), T0)  # W1 with 2 threads
    sched.client_message(GW, generate("r2"), T0)  # W1 back to 1, W2 with 1
    sends = sched.worker_message(W1, p.Disconnect(), T0 + 1)
    assert to_worker(W2, p.Threads(threads=1)) not in sends
    assert [s for s in sends if isinstance(s.message, p.Threads)] == []


def test_nothing_is_lent_when_lending_is_off() -> None:
    sched = attached(lend=False)
    assert sched.client_message(GW, generate("r1"), T0) == [to_worker(W1, generate("r1"))]
