"""Fault suite, scenario 7: more streaming clients than the workers and the queue can take.

Every request completes or is refused with 429/503 and Retry-After; every completed stream's
greedy text equals the same request served alone (no token lost, repeated or taken from
another stream); the peak RSS of each kind of process is reported.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import PROMPTS, Outcome, PeakRss, Tally, answer, chat, scale, stream
from tests.harness import Server, cmdline, start_server

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.fixture()
def own_server(tmp_path: Path) -> Iterator[Server]:
    # A short queue, so that the load is also refused, not only queued.
    running = start_server(tmp_path, server_queue_size="6")
    yield running
    left = running.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(p) for p in left]}"


def test_many_streaming_clients_get_their_own_tokens_or_a_polite_refusal(own_server: Server) -> None:
    clients, seconds = scale(16, 64), scale(15, 60)
    tally = Tally(f"7. overload: {clients} streaming clients for {seconds} s on 2 workers")
    references = {p: answer(own_server, p) for p in PROMPTS}
    refusals: dict[str, int] = {}
    problems: list[str] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(index: int) -> None:
        i = index
        while time.monotonic() < stop_at:
            prompt = PROMPTS[i % len(PROMPTS)]
            i += 1
            outcome = Outcome()
            stream(own_server, chat(prompt), outcome, timeout=300.0)
            tally.count(sent=1)
            if outcome.kind == "completed":
                tally.count(answered=1, wrong=int(outcome.text != references[prompt]))
                if outcome.text != references[prompt]:
                    problems.append(f"{prompt!r}: {outcome.text!r} != {references[prompt]!r}")
            elif outcome.kind == "status" and outcome.status in (429, 503) and outcome.retry_after:
                tally.count(errors=1)
                with lock:
                    refusals[str(outcome.status)] = refusals.get(str(outcome.status), 0) + 1
                time.sleep(min(float(outcome.retry_after), 2.0))
            else:
                tally.count(lost=1)
                problems.append(f"{outcome.kind} {outcome.status} {outcome.message}")

    with PeakRss(own_server) as rss:
        threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=seconds + 600)
        assert not any(thread.is_alive() for thread in threads), "a client hung"
    tally.notes.update(refusals=refusals, peak_rss_mib={k: round(v / 1024, 1) for k, v in rss.peaks.items()},
                       problems=problems[:5])
    tally.write()
    assert not problems, problems[:5]
    assert tally.answered > 0
    # Still serving afterwards.
    assert answer(own_server, PROMPTS[0]) == references[PROMPTS[0]]
