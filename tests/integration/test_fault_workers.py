"""Fault suite, scenarios 1 and 2: workers killed (SIGKILL) and frozen (SIGSTOP), over and over.

A stream whose worker dies after sending tokens ends with an error event; a request that
had sent no token is re-dispatched and answers exactly what it answers when served alone;
the worker is replaced; nothing hangs. ``REAME_FAULTS_LONG=1`` runs more rounds.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import PROMPTS, Outcome, Tally, answer, chat, freeze, scale, start_stream, thaw
from tests.harness import Server, busy_workers, cmdline, start_server
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]

# Long enough that no stream ends by itself while a round runs.
ENDLESS = chat("Write a very long story about a lighthouse.", max_tokens=3000, logit_bias={"2": -100})
# A request's whole life, client side: it must end (answer or error) well within this.
DEADLINE_S = 180.0


@pytest.fixture()
def own_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path, cache_enabled="false")
    yield running
    left = running.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(p) for p in left]}"


def wait_done(outcome: Outcome) -> Outcome:
    assert outcome.done.wait(DEADLINE_S), "a request hung past its deadline"
    return outcome


def busy_worker(server: Server) -> int:
    """The worker serving the one stream open: the one the dispatcher says is busy (the other is idle)."""
    def the_busy_one() -> int | None:
        busy = busy_workers(server)
        return busy.pop() if busy is not None and len(busy) == 1 else None

    return wait_for(the_busy_one, what="the dispatcher to name the one worker busy with the stream")


def test_worker_killed_mid_stream_repeatedly(own_server: Server) -> None:
    tally = Tally("1. worker SIGKILL mid-stream")
    references = {p: answer(own_server, p) for p in PROMPTS[:2]}
    for round_ in range(scale(2, 12)):
        streaming, _ = start_stream(own_server, ENDLESS)
        tally.count(sent=1)
        assert streaming.first_token.wait(DEADLINE_S) and streaming.kind == "pending", streaming.message
        victim = busy_worker(own_server)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        tally.count(faults=1)
        # The stream that had sent tokens ends with an error event, not a hang or a cut.
        wait_done(streaming)
        assert streaming.kind == "error", (streaming.kind, streaming.message)
        tally.count(errors=1)
        # Meanwhile the other worker keeps answering, exactly as before.
        prompt = PROMPTS[round_ % 2]
        got = answer(own_server, prompt)
        tally.count(sent=1, answered=1, wrong=int(got != references[prompt]))
        own_server.wait_ready(workers=2, timeout=DEADLINE_S)
        tally.recovery_s.append(time.monotonic() - killed_at)
        assert victim not in own_server.workers()
    tally.write()
    assert tally.wrong == 0


def test_request_that_sent_no_token_is_redispatched_after_its_worker_is_killed(own_server: Server) -> None:
    """One worker busy with a stream; a request goes to the other, which is frozen, then killed.

    (Both workers dying under one request is a second loss: MAX_DISPATCHES fails it then, by design.)
    """
    tally = Tally("1. worker SIGKILL before the first token (re-dispatch)")
    references = {p: answer(own_server, p) for p in PROMPTS[2:4]}
    for round_ in range(scale(1, 8)):
        busy, _ = start_stream(own_server, chat("Write a long story about a fox.", 300))
        tally.count(sent=1)
        assert busy.first_token.wait(DEADLINE_S) and busy.kind == "pending", busy.message
        (victim,) = [pid for pid in own_server.workers() if pid != busy_worker(own_server)]
        freeze(victim)
        prompt = PROMPTS[2 + round_ % 2]
        pending, _ = start_stream(own_server, chat(prompt))
        tally.count(sent=1)
        # The dispatcher hands it to the frozen worker, the only idle one, before the kill.
        wait_for(lambda v=victim: v in (busy_workers(own_server) or ()), what="the request to go to the frozen worker")
        os.kill(victim, signal.SIGKILL)
        thaw(victim)
        killed_at = time.monotonic()
        tally.count(faults=1)
        wait_done(pending)
        assert pending.kind == "completed", (pending.kind, pending.message)
        tally.count(answered=1, wrong=int(pending.text != references[prompt]))
        tally.recovery_s.append(time.monotonic() - killed_at)
        wait_done(busy)
        assert busy.kind == "completed", (busy.kind, busy.message)
        tally.count(answered=1)
        own_server.wait_ready(workers=2, timeout=DEADLINE_S)
    tally.write()
    assert "goes back to the front of the queue" in own_server.log()
    assert tally.wrong == 0


def test_worker_frozen_and_thawed_is_not_served_twice(own_server: Server) -> None:
    tally = Tally("2. worker SIGSTOP, then SIGCONT")
    references = {p: answer(own_server, p) for p in PROMPTS[4:6]}
    for round_ in range(scale(1, 8)):
        # One stream under way on the worker about to freeze; one request that has sent nothing.
        streaming, _ = start_stream(own_server, ENDLESS)
        tally.count(sent=1)
        assert streaming.first_token.wait(DEADLINE_S) and streaming.kind == "pending", streaming.message
        frozen = busy_worker(own_server)
        freeze(frozen)
        frozen_at = time.monotonic()
        tally.count(faults=1)
        prompt = PROMPTS[4 + round_ % 2]
        fresh, _ = start_stream(own_server, chat(prompt))
        tally.count(sent=1)
        try:
            # The heartbeat notices the silence: the started stream fails, the fresh one is answered.
            wait_done(streaming)
            assert streaming.kind == "error", (streaming.kind, streaming.message)
            wait_done(fresh)
            assert fresh.kind == "completed", (fresh.kind, fresh.message)
            tally.count(errors=1, answered=1, wrong=int(fresh.text != references[prompt]))
            noticed = wait_for(lambda: (own_server.ready() or {}).get("workers") == 1, DEADLINE_S, interval=0.1,
                               what="the dispatcher to drop the frozen worker")
            assert noticed
            tally.notes.setdefault("noticed_after_s", []).append(round(time.monotonic() - frozen_at, 2))
            text_when_failed = streaming.text
        finally:
            thaw(frozen)
        # Thawed, it announces itself again and serves; what it was doing reaches no client.
        own_server.wait_ready(workers=2, timeout=DEADLINE_S)
        tally.recovery_s.append(time.monotonic() - frozen_at)
        for prompt in PROMPTS[4:6]:
            got = answer(own_server, prompt)
            tally.count(sent=1, answered=1, wrong=int(got != references[prompt]))
        assert streaming.text == text_when_failed
    tally.write()
    assert tally.wrong == 0
