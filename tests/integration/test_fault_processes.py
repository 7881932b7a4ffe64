"""Fault suite, scenario 4: the dispatcher and the gateway's processes killed (SIGKILL).

While the dispatcher is gone the gateway answers 503 with Retry-After (never a hang or a
5xx without it) and serves again by itself once the supervisor has started a new one; a
gunicorn worker killed is replaced by its master, and a killed master by the supervisor.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults import PROMPTS, Tally, answer, chat, processes, scale, start_stream
from tests.harness import Server, cmdline, start_server
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]

DEADLINE_S = 180.0


@pytest.fixture()
def own_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path, cache_enabled="false")
    yield running
    left = running.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(p) for p in left]}"


def post(server: Server, prompt: str) -> tuple[int, str | None, str, float]:
    """Status, Retry-After, answer text and seconds taken; status 0 when the connection failed."""
    began = time.monotonic()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=DEADLINE_S)
        try:
            conn.request("POST", "/v1/chat/completions", json.dumps(chat(prompt)).encode(),
                         {"Content-Type": "application/json"})
            response = conn.getresponse()
            body = json.loads(response.read())
            status, retry = response.status, response.getheader("Retry-After")
        finally:
            conn.close()
    except OSError:
        return 0, None, "", time.monotonic() - began
    text = body["choices"][0]["message"]["content"] if status == 200 else ""
    return status, retry, text, time.monotonic() - began


def serve_through(server: Server, tally: Tally, references: dict[str, str], killed_at: float,
                  refused_ok: bool = False) -> None:
    """Send requests one after another until one is answered; check every answer and refusal."""
    i = 0
    while True:
        prompt = PROMPTS[i % 2]
        i += 1
        status, retry, text, took = post(server, prompt)
        tally.count(sent=1)
        if status == 200:
            tally.count(answered=1, wrong=int(text != references[prompt]))
            tally.recovery_s.append(time.monotonic() - killed_at)
            return
        if status == 0:
            # The listening socket itself was gone (a killed gunicorn master): a refused connection.
            assert refused_ok, "connection refused while the gateway was up"
            tally.count(lost=0)
            tally.notes["refused_connections"] = tally.notes.get("refused_connections", 0) + 1
        else:
            assert status == 503 and retry is not None and int(retry) >= 1, (status, retry)
            tally.count(errors=1)
            tally.notes["slowest_503_s"] = max(tally.notes.get("slowest_503_s", 0.0), round(took, 2))
        assert time.monotonic() - killed_at < DEADLINE_S, "the server did not recover"
        time.sleep(0.1)


def test_dispatcher_killed_gives_503_with_retry_after_and_recovers(own_server: Server) -> None:
    tally = Tally("4. dispatcher SIGKILL")
    references = {p: answer(own_server, p) for p in PROMPTS[:2]}
    for _ in range(scale(1, 8)):
        (dispatcher,) = processes(own_server, "dispatcher")
        streaming, _ = start_stream(own_server, chat("Write a very long story.", 3000, logit_bias={"2": -100}))
        tally.count(sent=1)
        assert streaming.first_token.wait(DEADLINE_S)
        os.kill(dispatcher, signal.SIGKILL)
        killed_at = time.monotonic()
        tally.count(faults=1)
        serve_through(own_server, tally, references, killed_at)
        # The stream under way when it died ended with an error, not a hang.
        assert streaming.done.wait(DEADLINE_S), "a stream hung after the dispatcher died"
        assert streaming.kind in ("error", "status"), (streaming.kind, streaming.message)
        tally.count(errors=1)
        own_server.wait_ready(workers=2, timeout=DEADLINE_S)
    tally.write()
    assert tally.wrong == 0


def gunicorn_workers(server: Server) -> list[int]:
    """Gateway processes whose parent is a gateway process too: gunicorn's workers."""
    gateways = processes(server, "gateway")
    parents = {pid: int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in gateways}
    return [pid for pid in gateways if parents[pid] in gateways]


def test_gateway_worker_and_master_killed_are_replaced(own_server: Server) -> None:
    tally = Tally("4. gateway SIGKILL (gunicorn worker, then master)")
    references = {p: answer(own_server, p) for p in PROMPTS[:2]}
    for _ in range(scale(1, 6)):
        (victim,) = gunicorn_workers(own_server)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        tally.count(faults=1)
        serve_through(own_server, tally, references, killed_at, refused_ok=True)
        wait_for(lambda: bool(gunicorn_workers(own_server)) and victim not in gunicorn_workers(own_server),  # noqa: B023
                 DEADLINE_S, interval=0.1, what="gunicorn to replace its worker")
    masters = [pid for pid in processes(own_server, "gateway") if pid not in gunicorn_workers(own_server)]
    assert len(masters) == 1, masters
    os.kill(masters[0], signal.SIGKILL)
    killed_at = time.monotonic()
    tally.count(faults=1)
    serve_through(own_server, tally, references, killed_at, refused_ok=True)
    tally.notes["master_recovery_s"] = round(tally.recovery_s[-1], 2)
    tally.write()
    assert tally.wrong == 0
