"""The harness's Server hands out openai clients and closes the ones left open when it stops."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("openai")

from reame.benchmarks.server import Server  # after the skip: the bench extra brings openai


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
