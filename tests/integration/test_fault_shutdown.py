"""Fault suite, scenarios 8 (the ZeroMQ side) and 9: bad messages straight to the sockets; SIGTERM with streams open.

The worker binds no socket (it connects to the dispatcher and the cachekeeper), so what
reaches it is what the dispatcher forwards: those are checked through the dispatcher.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
import zmq

from reame.shared import protocol
from tests.faults import PROMPTS, Tally, answer, chat, scale, start_stream
from tests.harness import Server, alive, cmdline, descendants, start_server
from tests.waiting import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.faults]

DEADLINE_S = 180.0

GARBAGE: list[list[bytes]] = [
    [b""],
    [b"\xff\xfe not msgpack at all"],
    [msgpack.packb([protocol.PROTOCOL_VERSION, "Generate", {"request_id": 7}])],  # wrong type
    [msgpack.packb([protocol.PROTOCOL_VERSION, "NoSuchKind", {}])],
    [msgpack.packb([999, "Heartbeat", {}])],  # another protocol version
    [msgpack.packb([protocol.PROTOCOL_VERSION, "Generate", {"request_id": "x", "extra": [[[[[]]]]]}])],
    [msgpack.packb(list(range(100_000)))],
    [b"a", b"b", b"c"],  # too many frames
    [msgpack.packb([protocol.PROTOCOL_VERSION, "Heartbeat", {"x": "y" * 1000}])],
    [b"\x00" * (64 * 1024 * 1024)],  # 64 MiB
]


@pytest.fixture()
def own_server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path)
    yield running
    left = running.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(p) for p in left]}"


def test_malformed_and_oversized_zeromq_messages_are_dropped_and_logged(own_server: Server) -> None:
    tally = Tally("8. malformed/oversized ZeroMQ messages")
    reference = answer(own_server, PROMPTS[0])
    pids_before = sorted(own_server.children())
    targets = {name: f"ipc://{own_server.run_dir / name}" for name in ("frontend.ipc", "backend.ipc", "cache.ipc")}
    present = {name: address for name, address in targets.items() if (own_server.run_dir / name).exists()}
    assert "frontend.ipc" in present and "backend.ipc" in present, list(own_server.run_dir.iterdir())
    context = zmq.Context()
    try:
        for _ in range(scale(2, 20)):
            for address in present.values():
                sock = context.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 1000)
                sock.connect(address)
                for frames in GARBAGE:
                    sock.send_multipart(frames)
                    tally.count(faults=1)
                sock.close()
            # Every process still serves, exactly as before.
            got = answer(own_server, PROMPTS[0])
            tally.count(sent=1, answered=1, wrong=int(got != reference))
    finally:
        context.destroy(linger=0)
    log = own_server.log()
    tally.notes.update(sockets=sorted(present), dropped_log_lines=log.lower().count("dropped"))
    tally.write()
    assert sorted(own_server.children()) == pids_before, "a process died or restarted"
    assert "dropped" in log.lower()
    assert tally.wrong == 0


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_sigterm_with_streams_open_ends_them_and_leaves_nothing(tmp_path: Path) -> None:
    tally = Tally("9. SIGTERM with streams open")
    for round_ in range(scale(1, 4)):
        server = start_server(tmp_path / f"round{round_}")
        family = descendants(server.proc.pid)
        streams = [start_stream(server, chat(f"Write a long story number {i}.", 3000, logit_bias={"2": -100}))[0]
                   for i in range(4)]
        tally.count(sent=len(streams))
        # Both workers streaming, the other two requests queued. Which two the dispatcher took
        # first is not the order they were sent in: waiting for the first two sent could wait
        # for a whole 3,000-token answer to end.
        wait_for(lambda started=streams: sum(o.first_token.is_set() for o in started) >= 2, DEADLINE_S,
                 what="two streams to start")
        server.proc.send_signal(signal.SIGTERM)
        sent_at = time.monotonic()
        tally.count(faults=1)
        for outcome in streams:
            assert outcome.done.wait(DEADLINE_S), "a stream was left hanging by the shutdown"
        tally.notes.setdefault("streams_ended_after_s", []).append(round(time.monotonic() - sent_at, 2))
        server.proc.wait(timeout=DEADLINE_S)
        tally.recovery_s.append(time.monotonic() - sent_at)  # here: time to a complete stop
        kinds = [o.kind for o in streams]
        tally.notes.setdefault("stream_endings", []).extend(kinds)
        tally.count(answered=kinds.count("completed"), errors=sum(k in ("error", "status") for k in kinds),
                    lost=kinds.count("broken"))
        left = [pid for pid in family if alive(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, [cmdline(pid) for pid in left]
        assert server.proc.returncode == 0, server.log()
        assert not port_open(server.port)
        assert not any(server.run_dir.glob("*.ipc")), list(server.run_dir.iterdir())
    tally.write()
    assert tally.lost == 0, tally.notes
