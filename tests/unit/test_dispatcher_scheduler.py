"""The dispatcher's scheduling rules, driven as events with no sockets."""

from __future__ import annotations

import msgspec
import pytest

from reame.dispatcher.scheduler import MAX_DISPATCHES, Scheduler
from reame.dispatcher.state import Dest, Send
from reame.shared import protocol as p

T0 = 1000.0
TTL = p.HEARTBEAT_INTERVAL_S * p.HEARTBEAT_LIVENESS
GW = b"gw-1"
GW2 = b"gw-2"
W1 = b"w-1"
W2 = b"w-2"


def gen(request_id: str, deadline: float = T0 + 600) -> p.Generate:
    return p.Generate(request_id=request_id, sampling=p.SamplingParams(), deadline=deadline, prompt="hi")


def ready(name: str = "w") -> p.Ready:
    return p.Ready(worker_id=name, pid=1, model="m", n_ctx=4096)


def to_client(message: p.Message, client: bytes = GW) -> Send:
    return Send(Dest.CLIENT, client, message)


def to_worker(identity: bytes, message: p.Message) -> Send:
    return Send(Dest.WORKER, identity, message)


def error_codes(sends: list[Send]) -> list[tuple[bytes, str, p.ErrorCode]]:
    return [(s.identity, s.message.request_id, s.message.code) for s in sends if isinstance(s.message, p.Error)]


def done(request_id: str) -> p.Done:
    return p.Done(request_id=request_id, finish_reason=p.FinishReason.STOP, prompt_tokens=1, completion_tokens=1)


def counts(sched: Scheduler) -> p.Status:
    """The status without the per-worker rows, which test_worker_states_say_who_is_busy checks."""
    return msgspec.structs.replace(sched.status(), worker_states=[])


@pytest.fixture
def sched() -> Scheduler:
    return Scheduler(queue_size=2, now=T0)


def attach(sched: Scheduler, *identities: bytes, now: float = T0) -> None:
    for identity in identities:
        assert sched.worker_message(identity, ready(identity.decode()), now) == []


# -- dispatch and queueing ---------------------------------------------------


def test_generate_without_workers_fails_at_once(sched: Scheduler) -> None:
    sends = sched.client_message(GW, gen("r1"), T0)
    assert error_codes(sends) == [(GW, "r1", p.ErrorCode.NO_WORKERS)]
    assert counts(sched) == p.Status(workers=0, idle_workers=0, queued=0, running=0)


def test_generate_goes_to_the_longest_idle_worker(sched: Scheduler) -> None:
    attach(sched, W1, W2)
    assert sched.client_message(GW, gen("r1"), T0) == [to_worker(W1, gen("r1"))]
    assert sched.client_message(GW, gen("r2"), T0) == [to_worker(W2, gen("r2"))]
    assert counts(sched) == p.Status(workers=2, idle_workers=0, queued=0, running=2)


def test_worker_freed_first_is_used_first(sched: Scheduler) -> None:
    attach(sched, W1, W2)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW, gen("r2"), T0)
    sched.worker_message(W2, done("r2"), T0)
    sched.worker_message(W1, done("r1"), T0)
    assert sched.client_message(GW, gen("r3"), T0) == [to_worker(W2, gen("r3"))]


def test_busy_workers_queue_in_fifo_order_then_overload(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    assert sched.client_message(GW, gen("r2"), T0) == []
    assert sched.client_message(GW2, gen("r3"), T0) == []
    assert error_codes(sched.client_message(GW, gen("r4"), T0)) == [(GW, "r4", p.ErrorCode.OVERLOADED)]
    assert counts(sched) == p.Status(workers=1, idle_workers=0, queued=2, running=1)

    sends = sched.worker_message(W1, done("r1"), T0)
    assert sends == [to_client(done("r1")), to_worker(W1, gen("r2"))]
    sends = sched.worker_message(W1, done("r2"), T0)
    assert sends == [to_client(done("r2")), to_worker(W1, gen("r3"))]


def test_queue_size_zero_means_no_waiting() -> None:
    sched = Scheduler(queue_size=0, now=T0)
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    assert error_codes(sched.client_message(GW, gen("r2"), T0)) == [(GW, "r2", p.ErrorCode.OVERLOADED)]


def test_duplicate_request_id_is_invalid(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    sends = sched.client_message(GW, gen("r1"), T0)
    assert error_codes(sends) == [(GW, "r1", p.ErrorCode.INVALID_REQUEST)]
    assert sched.status().running == 1


def test_generate_past_its_deadline_times_out(sched: Scheduler) -> None:
    attach(sched, W1)
    sends = sched.client_message(GW, gen("r1", deadline=T0 - 1), T0)
    assert error_codes(sends) == [(GW, "r1", p.ErrorCode.TIMEOUT)]
    assert sched.status().idle_workers == 1


# -- worker output -------------------------------------------------------------


def test_delta_done_and_error_are_forwarded(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    delta = p.Delta(request_id="r1", text="hello", tokens=1)
    assert sched.worker_message(W1, delta, T0) == [to_client(delta)]
    error = p.Error(request_id="r1", code=p.ErrorCode.CONTEXT_LENGTH_EXCEEDED, message="long")
    assert sched.worker_message(W1, error, T0) == [to_client(error)]
    assert counts(sched) == p.Status(workers=1, idle_workers=1, queued=0, running=0)


def test_delta_for_unknown_request_is_cancelled_at_the_worker(sched: Scheduler) -> None:
    attach(sched, W1)
    sends = sched.worker_message(W1, p.Delta(request_id="ghost", text="x", tokens=1), T0)
    assert sends == [to_worker(W1, p.Cancel(request_id="ghost"))]


def test_end_of_unknown_request_is_dropped_and_frees_nothing(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    assert sched.worker_message(W1, done("ghost"), T0) == []
    assert sched.status().running == 1


def test_output_from_the_wrong_worker_is_not_forwarded(sched: Scheduler) -> None:
    attach(sched, W1, W2)
    sched.client_message(GW, gen("r1"), T0)  # goes to W1
    sends = sched.worker_message(W2, p.Delta(request_id="r1", text="x", tokens=1), T0)
    assert sends == [to_worker(W2, p.Cancel(request_id="r1"))]
    assert sched.worker_message(W2, done("r1"), T0) == []
    assert sched.status().running == 1


def test_unknown_worker_is_asked_to_announce_itself(sched: Scheduler) -> None:
    assert sched.worker_message(W1, p.Heartbeat(), T0) == [to_worker(W1, p.Disconnect())]
    sends = sched.worker_message(W1, p.Delta(request_id="old", text="x", tokens=1), T0)
    assert sends == [to_worker(W1, p.Cancel(request_id="old")), to_worker(W1, p.Disconnect())]
    assert sched.worker_message(W1, done("old"), T0) == [to_worker(W1, p.Disconnect())]
    assert sched.worker_message(W1, p.Disconnect(), T0) == []
    assert sched.status().workers == 0


def test_ready_dispatches_queued_work(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW, gen("r2"), T0)
    assert sched.worker_message(W2, ready(), T0) == [to_worker(W2, gen("r2"))]


# -- cancel ----------------------------------------------------------------------


def test_cancel_of_a_queued_request_answers_cancelled(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW, gen("r2"), T0)
    sends = sched.client_message(GW, p.Cancel(request_id="r2"), T0)
    assert error_codes(sends) == [(GW, "r2", p.ErrorCode.CANCELLED)]
    assert sched.status().queued == 0
    assert sched.worker_message(W1, done("r1"), T0) == [to_client(done("r1"))]


def test_cancel_of_a_running_request_goes_to_its_worker_once(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    cancel = p.Cancel(request_id="r1")
    assert sched.client_message(GW, cancel, T0) == [to_worker(W1, cancel)]
    assert sched.client_message(GW, cancel, T0) == []
    reply = p.Error(request_id="r1", code=p.ErrorCode.CANCELLED, message="cancelled")
    assert sched.worker_message(W1, reply, T0) == [to_client(reply)]
    assert sched.status().idle_workers == 1


def test_cancel_from_another_client_or_unknown_id_is_ignored(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    assert sched.client_message(GW2, p.Cancel(request_id="r1"), T0) == []
    assert sched.client_message(GW, p.Cancel(request_id="nope"), T0) == []
    assert sched.status().running == 1


# -- status and stray messages -------------------------------------------------


def test_status_query_is_answered(sched: Scheduler) -> None:
    attach(sched, W1, W2)
    sched.client_message(GW, gen("r1"), T0)
    sends = sched.client_message(GW2, p.StatusQuery(), T0)
    assert [(s.dest, s.identity) for s in sends] == [(Dest.CLIENT, GW2)]
    assert msgspec.structs.replace(sends[0].message, worker_states=[]) == p.Status(
        workers=2, idle_workers=1, queued=0, running=1
    )


def test_worker_states_say_who_is_busy_what_it_holds_and_how_much_it_served(sched: Scheduler) -> None:
    attach(sched, W1, W2)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW, gen("r2"), T0 + 0.5)  # too short to wait for W1: W2 takes it
    sched.worker_message(W1, done("r1"), T0 + 1)
    states = {s.name: s for s in sched.status().worker_states}
    first, second = states["w-1 (pid 1)"], states["w-2 (pid 1)"]
    assert (first.busy, first.served) == (False, 1)
    assert (second.busy, second.served) == (True, 0)
    assert first.held_chars == second.held_chars > 0  # both prompts are gen()'s "hi"
    assert first.held_prefix == second.held_prefix != ""
    sched.worker_message(W1, p.Disconnect(), T0 + 3)
    assert [s.name for s in sched.status().worker_states] == ["w-2 (pid 1)"]


def test_done_says_how_long_the_request_waited_for_a_worker(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW, gen("r2"), T0 + 1)  # queued behind r1
    sends = sched.worker_message(W1, done("r1"), T0 + 3)
    assert sends[0].message == msgspec.structs.replace(done("r1"), queue_ms=0.0)
    sends = sched.worker_message(W1, done("r2"), T0 + 4)
    assert sends[0].message == msgspec.structs.replace(done("r2"), queue_ms=2000.0)


def test_messages_of_the_wrong_direction_are_dropped(sched: Scheduler) -> None:
    attach(sched, W1)
    assert sched.client_message(GW, p.Ready(worker_id="x", pid=1, model="m", n_ctx=1), T0) == []
    assert sched.client_message(GW, p.Heartbeat(), T0) == []
    assert sched.worker_message(W1, gen("r1"), T0) == []
    assert counts(sched) == p.Status(workers=1, idle_workers=1, queued=0, running=0)


# -- liveness --------------------------------------------------------------------


def test_heartbeats_go_to_workers_and_waiting_clients_once_per_interval(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW2, gen("r2"), T0)
    sched.client_message(GW2, gen("r3"), T0)
    assert sched.heartbeats(T0 + p.HEARTBEAT_INTERVAL_S / 2) == []
    now = T0 + p.HEARTBEAT_INTERVAL_S
    sends = sched.heartbeats(now)
    assert len(sends) == 3
    assert set(sends) == {
        to_worker(W1, p.Heartbeat()), to_client(p.Heartbeat(), GW), to_client(p.Heartbeat(), GW2),
    }
    assert sched.heartbeats(now) == []
    assert sched.next_heartbeat_at == now + p.HEARTBEAT_INTERVAL_S


def test_heartbeats_resume_after_the_clock_is_set_back(sched: Scheduler) -> None:
    attach(sched, W1)
    assert sched.heartbeats(T0 - 3600) == [to_worker(W1, p.Heartbeat())]


def test_any_worker_message_refreshes_its_expiry(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.worker_message(W1, p.Heartbeat(), T0 + TTL - 0.1)
    assert sched.purge_expired(T0 + TTL + 0.1) == []
    assert sched.status().workers == 1
    sched.purge_expired(T0 + 2 * TTL)
    assert sched.status().workers == 0


def test_dead_idle_worker_is_removed(sched: Scheduler) -> None:
    attach(sched, W1)
    assert sched.purge_expired(T0 + TTL) == []
    assert sched.status().workers == 0
    assert sched.worker_message(W1, p.Heartbeat(), T0 + TTL) == [to_worker(W1, p.Disconnect())]


def test_request_of_a_dead_worker_is_redispatched_before_queued_ones(sched: Scheduler) -> None:
    attach(sched, W1)
    attach(sched, W2, now=T0 + 1)
    sched.client_message(GW, gen("r1"), T0 + 1)  # W1
    sched.client_message(GW, gen("r2"), T0 + 1)  # W2
    sched.client_message(GW, gen("r3"), T0 + 1)  # queued
    sched.worker_message(W2, done("r2"), T0 + 1)  # W2 takes r3
    sched.client_message(GW, gen("r4"), T0 + 1)  # queued
    sends = sched.purge_expired(T0 + TTL)  # W1 is dead; r1 goes to the front
    assert sends == []
    assert counts(sched) == p.Status(workers=1, idle_workers=0, queued=2, running=1, full_prefills=1)
    sends = sched.worker_message(W2, done("r3"), T0 + TTL)
    assert sends == [to_client(done("r3")), to_worker(W2, gen("r1"))]


def test_redispatch_happens_at_once_when_a_worker_is_idle(sched: Scheduler) -> None:
    attach(sched, W1)
    attach(sched, W2, now=T0 + 1)
    sched.client_message(GW, gen("r1"), T0 + 1)
    assert sched.purge_expired(T0 + TTL) == [to_worker(W2, gen("r1"))]


def test_request_is_not_redispatched_to_a_worker_dying_in_the_same_tick(sched: Scheduler) -> None:
    attach(sched, W1, W2)
    sched.client_message(GW, gen("r1"), T0)  # W1; both fall silent (frozen, then killed)
    assert sched.purge_expired(T0 + TTL) == []
    assert counts(sched) == p.Status(workers=0, idle_workers=0, queued=1, running=0)
    assert sched.worker_message(W1, ready(), T0 + TTL) == [to_worker(W1, gen("r1"))]  # its replacement


def test_started_request_of_a_dead_worker_is_lost(sched: Scheduler) -> None:
    attach(sched, W1)
    attach(sched, W2, now=T0 + 1)
    sched.client_message(GW, gen("r1"), T0 + 1)
    sched.worker_message(W1, p.Delta(request_id="r1", text="x", tokens=1), T0)
    sends = sched.purge_expired(T0 + TTL)
    assert error_codes(sends) == [(GW, "r1", p.ErrorCode.WORKER_LOST)]
    assert counts(sched) == p.Status(workers=1, idle_workers=1, queued=0, running=0)


def test_request_is_dispatched_at_most_twice(sched: Scheduler) -> None:
    assert MAX_DISPATCHES == 2
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    sched.worker_message(W1, p.Disconnect(), T0)  # first loss: requeued
    assert sched.status().queued == 1
    assert sched.worker_message(W2, ready(), T0) == [to_worker(W2, gen("r1"))]
    sends = sched.worker_message(W2, p.Disconnect(), T0)
    assert error_codes(sends) == [(GW, "r1", p.ErrorCode.WORKER_LOST)]
    assert counts(sched) == p.Status(workers=0, idle_workers=0, queued=0, running=0)


def test_cancelled_request_of_a_dead_worker_is_not_redispatched(sched: Scheduler) -> None:
    attach(sched, W1, W2)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW, p.Cancel(request_id="r1"), T0)
    sends = sched.worker_message(W1, p.Disconnect(), T0)
    assert error_codes(sends) == [(GW, "r1", p.ErrorCode.CANCELLED)]
    assert sched.status().idle_workers == 1


def test_worker_announcing_itself_again_loses_its_request(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    # Requeued, then handed to the re-registered worker at once.
    assert sched.worker_message(W1, ready(), T0) == [to_worker(W1, gen("r1"))]
    assert counts(sched) == p.Status(workers=1, idle_workers=0, queued=0, running=1)


def test_queued_request_past_its_deadline_times_out(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW, gen("r2", deadline=T0 + 0.5), T0)
    sched.client_message(GW, gen("r3", deadline=T0 + 5), T0)
    sched.worker_message(W1, p.Heartbeat(), T0 + 0.5)
    sends = sched.purge_expired(T0 + 0.5)
    assert error_codes(sends) == [(GW, "r2", p.ErrorCode.TIMEOUT)]
    assert sched.status().queued == 1


def test_expired_queued_request_is_skipped_when_a_worker_frees_up(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW, gen("r2", deadline=T0 + 0.5), T0)
    sched.client_message(GW, gen("r3"), T0)
    sends = sched.worker_message(W1, done("r1"), T0 + 1)
    assert sends[0] == to_client(done("r1"))
    assert error_codes(sends[1:2]) == [(GW, "r2", p.ErrorCode.TIMEOUT)]
    assert sends[2] == to_worker(W1, gen("r3"))


# -- shutdown --------------------------------------------------------------------


def test_shutdown_fails_every_pending_request(sched: Scheduler) -> None:
    attach(sched, W1)
    sched.client_message(GW, gen("r1"), T0)
    sched.client_message(GW2, gen("r2"), T0)
    sends = sched.shutdown()
    assert to_worker(W1, p.Cancel(request_id="r1")) in sends
    assert sorted(error_codes(sends)) == [
        (GW, "r1", p.ErrorCode.SHUTTING_DOWN), (GW2, "r2", p.ErrorCode.SHUTTING_DOWN),
    ]
    assert counts(sched) == p.Status(workers=0, idle_workers=0, queued=0, running=0)
