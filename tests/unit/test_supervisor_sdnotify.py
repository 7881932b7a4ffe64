"""sd_notify readiness: `reame serve`'s arbiter tells a fake systemd when it is ready and when it stops."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reame.shared.sdnotify import notify
from reame.supervisor.arbiter import gateway_ready
from tests.waiting import PATIENCE_S

ROOT = Path(__file__).resolve().parents[2]

# The arbiter in its own process (it installs signal handlers), supervising one sleeping child.
DRIVER = """
import sys
from reame.shared import logs
from reame.supervisor.arbiter import Arbiter, ChildSpec
logs.setup("reame", "info")
child = ChildSpec("sleeper", None, (sys.executable, "-c", "import time; time.sleep(120)"))
sys.exit(Arbiter([child], grace=10, banner="serving", ready=lambda: True).run())
"""


@pytest.fixture
def fake_systemd(tmp_path: Path) -> Iterator[socket.socket]:
    """A unix datagram socket where systemd would listen, as NOTIFY_SOCKET names it."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify"))
    sock.settimeout(PATIENCE_S)  # an upper bound: only a failure waits it out
    yield sock
    sock.close()


def test_notify_sends_one_datagram(fake_systemd: socket.socket) -> None:
    assert notify("READY=1", {"NOTIFY_SOCKET": fake_systemd.getsockname()})
    assert fake_systemd.recv(4096) == b"READY=1"


def test_notify_reaches_an_abstract_socket() -> None:
    name = f"reame-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(PATIENCE_S)
        assert notify("STOPPING=1", {"NOTIFY_SOCKET": "@" + name})
        assert sock.recv(4096) == b"STOPPING=1"


def test_without_systemd_nothing_is_sent(tmp_path: Path) -> None:
    assert not notify("READY=1", {})
    assert not notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})


def test_the_arbiter_says_ready_then_stopping(fake_systemd: socket.socket) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NOTIFY_SOCKET": fake_systemd.getsockname()}
    proc = subprocess.Popen([sys.executable, "-c", DRIVER], env=env, stderr=subprocess.PIPE, text=True)
    try:
        ready = fake_systemd.recv(4096).decode()
        assert ready.splitlines() == ["READY=1", "STATUS=serving"]
        proc.send_signal(signal.SIGTERM)
        assert fake_systemd.recv(4096) == b"STOPPING=1"
        assert proc.wait(PATIENCE_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


class _Probe(http.server.BaseHTTPRequestHandler):
    answer = 503

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path}).encode()
        self.send_response(self.answer if self.path == "/ready" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_ready_means_the_gateway_answers_ready_with_200() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Probe)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        check = gateway_ready("127.0.0.1", server.server_address[1])
        assert not check()  # listening, but no worker yet: 503
        _Probe.answer = 200
        assert check()
        assert gateway_ready("0.0.0.0", server.server_address[1])()  # a wildcard bind is asked on loopback
    finally:
        server.shutdown()
        server.server_close()
    assert not check()  # nothing listens
