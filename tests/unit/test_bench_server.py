"""The harness's Server: it closes the openai clients left open when it stops; its servers die with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, cast

import pytest

from tests.waiting import wait_for

pytest.importorskip("openai")

from reame.benchmarks.server import Server, alive  # after the skip: the bench extra brings openai


def test_clients_left_open_are_closed_by_close_clients(tmp_path: Path) -> None:
    server = Server(proc=cast("subprocess.Popen[bytes]", None), port=1, tmp=tmp_path)
    inline = server.client()
    with server.client(timeout=5) as scoped:
        pass
    assert scoped.is_closed() and not inline.is_closed()
    server.client()  # forgets the closed one
    kept: list[Any] = server._clients
    assert scoped not in kept and inline in kept
    server.close_clients()
    assert inline.is_closed() and not server._clients


def test_a_spawned_server_dies_with_the_process_that_spawned_it(tmp_path: Path) -> None:
    # A test run killed before its teardown (kill -9, a crash) must not leave its servers running.
    runner = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from reame.benchmarks.server import spawn
        child = spawn([sys.executable, "-c", "import time; time.sleep(600)"], {{}}, Path({str(tmp_path)!r}) / "log")
        print(child.pid, flush=True)
        sys.stdin.read()
    """)
    with subprocess.Popen([sys.executable, "-c", runner], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as parent:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        try:
            assert alive(child)
            parent.send_signal(signal.SIGKILL)
            parent.wait()
            wait_for(lambda: not alive(child), timeout=30, what="the spawned server to die with its parent")
        finally:
            if alive(child):
                os.kill(child, signal.SIGKILL)
