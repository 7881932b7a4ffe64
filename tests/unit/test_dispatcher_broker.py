"""The dispatcher's socket loop with real ZeroMQ sockets, a fake worker and a fake gateway."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from reame.dispatcher.broker import Broker
from reame.dispatcher.main import main
from reame.dispatcher.scheduler import Scheduler
from reame.shared import endpoints
from reame.shared import protocol as p
from reame.shared.lifecycle import EXIT_BOOT_FAILURE, StopFlag
from tests.waiting import PATIENCE_S, wait_for

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = PATIENCE_S  # an upper bound for a busy machine: only a failure waits it out


@pytest.fixture
def run_dir() -> Iterator[Path]:
    # ipc:// paths are limited to about 100 bytes: keep them short.
    top = Path(tempfile.mkdtemp(prefix="reame-t"))
    yield top / "run"
    shutil.rmtree(top)


Dealer = Callable[[str, bytes], "zmq.Socket[Any]"]


@pytest.fixture
def dealer() -> Iterator[Dealer]:
    """Connect DEALER sockets as a worker or a gateway does; close them all afterwards."""
    context: zmq.Context[Any] = zmq.Context()
    sockets: list[zmq.Socket[Any]] = []

    def connect(address: str, identity: bytes) -> zmq.Socket[Any]:
        sock: zmq.Socket[Any] = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.IDENTITY, identity)
        sock.connect(address)
        sockets.append(sock)
        return sock

    yield connect
    for sock in sockets:
        sock.close()
    context.term()


@pytest.fixture
def restore_process_state() -> Iterator[None]:
    """Undo what main() does to the whole process: signal handlers and log handlers."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    root.handlers[:], root.level = saved


def receive(sock: zmq.Socket[Any]) -> p.Message:
    """Return the next message that is not a heartbeat."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0 and sock.poll(int(remaining * 1000)), "no message arrived"
        message = p.decode(sock.recv())
        if not isinstance(message, p.Heartbeat):
            return message


def status(client: zmq.Socket[Any]) -> p.Status:
    client.send(p.encode(p.StatusQuery()))
    reply = receive(client)
    assert isinstance(reply, p.Status)
    return reply


def test_request_flows_from_client_to_worker_and_back(run_dir: Path, dealer: Dealer) -> None:
    frontend, backend = f"ipc://{run_dir}/frontend.ipc", f"ipc://{run_dir}/backend.ipc"
    broker = Broker(frontend, backend, Scheduler(queue_size=4, now=time.time()))
    broker.bind()
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    stop = StopFlag()
    loop = threading.Thread(target=broker.run, args=(stop,), daemon=True)
    loop.start()
    worker = dealer(backend, b"worker-0")
    client = dealer(frontend, b"gateway-0")
    try:
        worker.send(p.encode(p.Ready(worker_id="w0", pid=os.getpid(), model="m", n_ctx=512)))
        # Bad input on either side is dropped without stopping the loop.
        client.send(b"\x00not msgpack")
        client.send_multipart([b"two", b"frames"])
        worker.send(p.encode(p.Heartbeat())[:-1])
        wait_for(lambda: status(client).workers == 1, what="the worker to register")

        request = p.Generate(request_id="r1", sampling=p.SamplingParams(), deadline=time.time() + 60,
                             prompt="hello")
        client.send(p.encode(request))
        assert receive(worker) == request
        delta = p.Delta(request_id="r1", text="hi", tokens=1)
        end = p.Done(request_id="r1", finish_reason=p.FinishReason.STOP, prompt_tokens=1,
                     completion_tokens=1)
        worker.send(p.encode(delta))
        worker.send(p.encode(end))
        assert receive(client) == delta
        assert receive(client) == end

        # A running request is failed with SHUTTING_DOWN when the dispatcher stops.
        second = p.Generate(request_id="r2", sampling=p.SamplingParams(), deadline=time.time() + 60,
                            prompt="again")
        client.send(p.encode(second))
        assert receive(worker) == second
    finally:
        stop.set()
        loop.join(TIMEOUT_S)
        broker.close()
    assert not loop.is_alive()
    assert receive(client) == p.Error(request_id="r2", code=p.ErrorCode.SHUTTING_DOWN,
                                      message="the dispatcher is shutting down")
    assert receive(worker) == p.Cancel(request_id="r2")
    assert not (run_dir / "frontend.ipc").exists()
    assert not (run_dir / "backend.ipc").exists()


def test_second_dispatcher_on_the_same_address_cannot_bind(run_dir: Path) -> None:
    frontend, backend = f"ipc://{run_dir}/f.ipc", f"ipc://{run_dir}/b.ipc"
    first = Broker(frontend, backend, Scheduler(queue_size=1, now=0.0))
    first.bind()
    second = Broker(frontend, backend, Scheduler(queue_size=1, now=0.0))
    try:
        with pytest.raises(endpoints.BindError, match="in use"):
            second.bind()
    finally:
        second.close()
        first.close()


def test_stale_socket_file_is_replaced(run_dir: Path) -> None:
    run_dir.mkdir(mode=0o700)
    stale = run_dir / "f.ipc"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(str(stale))  # a socket file nobody listens on, as after kill -9
    endpoints.prepare(f"ipc://{stale}")
    assert not stale.exists()


def test_regular_file_in_the_way_is_not_removed(run_dir: Path) -> None:
    run_dir.mkdir(mode=0o700)
    (run_dir / "f.ipc").write_text("precious")
    with pytest.raises(endpoints.EndpointError, match="not a socket"):
        endpoints.prepare(f"ipc://{run_dir}/f.ipc")
    assert (run_dir / "f.ipc").read_text() == "precious"


def test_main_exits_with_boot_failure_when_it_cannot_bind(
    tmp_path: Path, restore_process_state: None
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        conf = tmp_path / "reame.conf"
        conf.write_text(f"[dispatcher]\nfrontend = tcp://127.0.0.1:{port}\nbackend = tcp://127.0.0.1:0\n")
        assert main(["--config", str(conf)]) == EXIT_BOOT_FAILURE


def test_main_exits_with_boot_failure_on_a_bad_config(tmp_path: Path, restore_process_state: None) -> None:
    conf = tmp_path / "reame.conf"
    conf.write_text("[server]\nqueue_size = lots\n")
    assert main(["--config", str(conf)]) == EXIT_BOOT_FAILURE


def test_process_stops_cleanly_on_sigterm(run_dir: Path, tmp_path: Path) -> None:
    conf = tmp_path / "reame.conf"
    conf.write_text(f"[server]\nrun_dir = {run_dir}\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-P", "-m", "reame.dispatcher", "--config", str(conf)], env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (run_dir / "backend.ipc").exists() or proc.poll() is not None, what="the sockets")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err
    assert "stopped" in err
    assert list(run_dir.iterdir()) == []


def test_a_message_over_the_size_limit_is_dropped_and_others_are_served(run_dir: Path, dealer: Dealer) -> None:
    frontend, backend = f"ipc://{run_dir}/frontend.ipc", f"ipc://{run_dir}/backend.ipc"
    broker = Broker(frontend, backend, Scheduler(queue_size=4, now=time.time()), max_request_bytes=4096)
    broker.bind()
    stop = StopFlag()
    loop = threading.Thread(target=broker.run, args=(stop,), daemon=True)
    loop.start()
    worker = dealer(backend, b"worker-0")
    try:
        worker.send(p.encode(p.Ready(worker_id="w0", pid=os.getpid(), model="m", n_ctx=512)))
        client = dealer(frontend, b"gateway-0")
        wait_for(lambda: status(client).workers == 1, what="the worker to register")
        huge = p.Generate(request_id="huge", sampling=p.SamplingParams(), deadline=time.time() + 60,
                          prompt="x" * 10_000)
        client.send(p.encode(huge))
        other = dealer(frontend, b"gateway-1")
        request = p.Generate(request_id="r1", sampling=p.SamplingParams(), deadline=time.time() + 60, prompt="hi")
        other.send(p.encode(request))
        assert receive(worker) == request  # the huge one never reached the scheduler
    finally:
        stop.set()
        loop.join(TIMEOUT_S)
        broker.close()
