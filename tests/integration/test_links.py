"""Links between processes: CURVE over tcp:// on 127.0.0.1, and a server whose cache cannot start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from reame.shared import endpoints
from reame.shared import protocol as p
from reame.shared.config import SecurityConfig
from reame.supervisor import keys as keygen
from tests.harness import Server, cmdline, free_port, start_server
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

QUESTION: dict[str, Any] = {
    "model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4, "temperature": 0,
}
ROGUE_HELLO = p.Ready(worker_id="rogue", pid=1, model="m", n_ctx=4096, threads=1, host="elsewhere")


def answer(server: Server) -> str:
    reply = server.client().chat.completions.create(**QUESTION)
    return reply.choices[0].message.content or ""


def stop(server: Server) -> None:
    left = server.stop()
    assert not left, f"processes left after SIGTERM: {[cmdline(pid) for pid in left]}"


@pytest.fixture()
def curve_server(tmp_path: Path) -> Iterator[tuple[Server, Path, str]]:
    """A server whose dispatcher and cachekeeper listen on 127.0.0.1 tcp ports with CURVE."""
    key_dir = tmp_path / "keys"
    keygen.generate(key_dir)
    backend = f"tcp://127.0.0.1:{free_port()}"
    server = start_server(
        tmp_path / "serve", workers=1,
        dispatcher_frontend=f"tcp://127.0.0.1:{free_port()}", dispatcher_backend=backend,
        cache_address=f"tcp://127.0.0.1:{free_port()}",
        security_curve_server_key=str(key_dir / "server.key_secret"),
        security_curve_authorized_dir=str(key_dir / "authorized"),
        security_curve_client_key=str(key_dir / "client.key_secret"),
        security_curve_server_public=str(key_dir / "server.key"),
    )
    yield server, key_dir, backend
    stop(server)


def rogue_worker(context: zmq.Context[Any], backend: str, security: SecurityConfig | None) -> zmq.Socket[Any]:
    """A DEALER that announces itself as a worker, with the given CURVE keys or none."""
    sock: zmq.Socket[Any] = context.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if security is not None:
        endpoints.secure_client(sock, backend, endpoints.link_keys(security, connects=[backend]))
    sock.connect(backend)
    sock.send(p.encode(ROGUE_HELLO))
    return sock


def test_listed_key_serves_over_tcp_and_an_unlisted_one_is_refused_and_logged(
    curve_server: tuple[Server, Path, str], tmp_path: Path
) -> None:
    server, key_dir, backend = curve_server
    assert answer(server)
    state = server.ready()
    assert state is not None and state["workers"] == 1
    assert state["cache"] == "on"  # the gateway asked the cachekeeper, over CURVE too

    # Another valid key pair that knows the server's public key, but is not listed.
    stranger_dir = tmp_path / "stranger"
    keygen.generate(stranger_dir, "rogue")
    stranger = SecurityConfig("", "", str(stranger_dir / "rogue.key_secret"), str(key_dir / "server.key"), False)
    context: zmq.Context[Any] = zmq.Context()
    try:
        keyed = rogue_worker(context, backend, stranger)
        plain = rogue_worker(context, backend, None)
        wait_for(lambda: "refused a connection from 127.0.0.1" in server.log(), what="the refusal in the log")
        for _ in range(3):  # requests keep going to the real worker, never to the rogues
            assert answer(server)
        state = server.ready()
        assert state is not None and state["workers"] == 1
        assert not keyed.poll(0) and not plain.poll(0)
        keyed.close()
        plain.close()
    finally:
        context.destroy(linger=0)
    assert "WARNING" in next(line for line in server.log().splitlines() if "refused a connection" in line)


def test_listed_worker_key_is_accepted_by_the_dispatcher(curve_server: tuple[Server, Path, str]) -> None:
    server, key_dir, backend = curve_server
    listed = SecurityConfig("", "", str(key_dir / "client.key_secret"), str(key_dir / "server.key"), False)
    context: zmq.Context[Any] = zmq.Context()
    try:
        extra = rogue_worker(context, backend, listed)
        wait_for(lambda: (server.ready() or {}).get("workers") == 2, what="the dispatcher to count the keyed worker")
        extra.send(p.encode(p.Disconnect()))
        extra.close()
    finally:
        context.destroy(linger=0)


def test_unwritable_cache_directory_serves_without_the_cache(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file where the cache directory's parent should be")
    server = start_server(tmp_path / "serve", workers=1, cache_dir=str(blocker / "kv"))
    try:
        state = server.ready()
        assert state is not None and state["cache"] == "off"
        assert answer(server)
        wait_for(lambda: "serving without it, trying again" in server.log(), what="the cachekeeper's retry")
        assert server.proc.poll() is None
    finally:
        stop(server)

