"""Workers die, freeze and clients leave; the server keeps answering and cleans up."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.harness import Server, alive, cmdline, descendants, start_server
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

LONG: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "Write a very long story about a lighthouse."}],
    "max_tokens": 3000,
    "logit_bias": {"2": -100},
    "stream": True,
}


@pytest.fixture()
def own_server(tmp_path: Path) -> Iterator[Server]:
    """A server of its own, since these tests kill its parts."""
    running = start_server(tmp_path)
    yield running
    left = running.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(p) for p in left]}"


def stream_until_error(server: Server, started: threading.Event, outcome: dict[str, Any]) -> None:
    chunks = 0
    try:
        stream = server.client().chat.completions.create(**LONG)
        for _ in stream:
            chunks += 1
            if chunks == 3:
                started.set()
        outcome["result"] = "completed"
    except openai.APIError as err:
        outcome["result"] = "error"
        outcome["message"] = str(err)
    finally:
        outcome["chunks"] = chunks
        started.set()


def test_killed_worker_gives_an_error_event_and_is_replaced(own_server: Server) -> None:
    workers_before = own_server.workers()
    assert len(workers_before) == 2
    # Occupy both workers, so whichever one dies is serving a stream.
    runs = [({}, threading.Event()) for _ in range(2)]
    threads = [
        threading.Thread(target=stream_until_error, args=(own_server, started, outcome), daemon=True)
        for outcome, started in runs
    ]
    for thread in threads:
        thread.start()
    for _, started in runs:
        assert started.wait(120)
    victim = workers_before[0]
    os.kill(victim, signal.SIGKILL)
    # The stream the victim served ends with an error event; cancel the other one.
    wait_for(lambda: any(outcome.get("result") for outcome, _ in runs), interval=0.1, what="a stream to end")
    outcomes = [outcome for outcome, _ in runs]
    assert any(o.get("result") == "error" for o in outcomes), outcomes
    # A replacement worker attaches and the next request succeeds.
    own_server.wait_ready(workers=2, timeout=60)
    assert victim not in own_server.workers()
    reply = own_server.client().chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert reply.choices[0].message.content is not None


def test_frozen_worker_is_noticed_and_requests_still_succeed(own_server: Server) -> None:
    frozen = own_server.workers()[0]
    os.kill(frozen, signal.SIGSTOP)
    try:
        # Requests sent while one worker is frozen: any that reaches it is re-dispatched
        # once the dispatcher notices the silence, so every one of them completes.
        for i in range(3):
            reply = own_server.client().chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"Say {i}."}], max_tokens=4
            )
            assert reply.choices[0].finish_reason in ("stop", "length")
        wait_for(lambda: (own_server.ready() or {}).get("workers") == 1, interval=0.2,
                 what="the dispatcher to drop the frozen worker")
    finally:
        os.kill(frozen, signal.SIGCONT)
    # Woken up, it announces itself again.
    own_server.wait_ready(workers=2, timeout=60)


def test_client_disconnect_cancels_generation(own_server: Server) -> None:
    for _ in range(2):
        stream = own_server.client().chat.completions.create(**LONG)
        for i, _chunk in enumerate(stream):
            if i == 3:
                break
        stream.close()
    # Both workers were given 3000 tokens of work; cancelled, they are idle again at their next token.
    wait_for(lambda: (own_server.ready() or {}).get("idle_workers") == 2, interval=0.2,
             what="both workers to be idle again")
    assert "cancel" in own_server.log().lower()


def test_queue_overflow_is_429_with_retry_after(tmp_path: Path) -> None:
    server = start_server(tmp_path, workers=1, server_queue_size="0")
    try:
        started, outcome = threading.Event(), {}
        thread = threading.Thread(target=stream_until_error, args=(server, started, outcome), daemon=True)
        thread.start()
        assert started.wait(120)
        status, headers, body = server.post_json(
            "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert status == 429, body
        assert int(headers["Retry-After"]) >= 1
        assert body["error"]["type"]
    finally:
        left = server.stop()
    assert not left


def test_sigterm_leaves_no_process_behind(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    family = descendants(server.proc.pid)
    assert len(family) >= 4  # dispatcher, 2 workers, gateway (and its gunicorn workers)
    left = server.stop()
    assert server.proc.returncode == 0, server.log()
    assert not left, [cmdline(pid) for pid in left]
    assert not any(alive(pid) for pid in family)
    run_dir = tmp_path / "run"
    assert not any(run_dir.glob("*.ipc")), list(run_dir.iterdir())


def test_bad_config_stops_start_up_naming_the_key(tmp_path: Path) -> None:
    import subprocess
    import sys

    conf = tmp_path / "bad.conf"
    conf.write_text("[server]\nport = lots\n")
    result = subprocess.run(
        [sys.executable, "-P", "-m", "reame.supervisor", "serve", "--config", str(conf)],
        capture_output=True, text=True, timeout=60, env={**os.environ},
    )
    assert result.returncode != 0
    assert "port" in result.stderr and "lots" in result.stderr, result.stderr
