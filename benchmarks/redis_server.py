"""A redis-server of one's own (Debian's package) for the shared cache tier: the tests' and `reame bench fleet`'s.

No persistence, a memory cap under LRU (the engine's own eviction, as the shared tier's
config documents), on a unix socket or on a TCP port of 127.0.0.1; stopped and its
directory removed on exit, even on failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import redis

from reame.shared.lifecycle import die_with_parent

START_TIMEOUT_S: Final = 60.0


@dataclass
class RedisServer:
    proc: subprocess.Popen[bytes]
    unix_path: Path | None  # None: on ``port`` of 127.0.0.1
    port: int = 0
    reply_timeout_s: float = 5.0

    @property
    def url(self) -> str:
        return f"unix://{self.unix_path}" if self.unix_path is not None else f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        if self.unix_path is not None:
            return redis.Redis(unix_socket_path=str(self.unix_path), socket_timeout=self.reply_timeout_s)
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=self.reply_timeout_s)

    def listening(self) -> bool:
        if self.unix_path is not None:
            return self.unix_path.exists()
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1.0):
            return True
        return False

    def answers(self) -> bool:
        with contextlib.suppress(redis.RedisError, OSError), self.client() as client:
            return bool(client.ping())
        return False

    def used_memory(self) -> int:
        with self.client() as client:
            info = client.info("memory")
        return int(info["used_memory"])

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)


@contextlib.contextmanager
def running_redis(*extra: str, port: int = 0, maxmemory: str = "64mb",
                  reply_timeout_s: float = 5.0) -> Iterator[RedisServer]:
    """Run redis-server until the block ends: on a unix socket, or on ``port`` of 127.0.0.1 when given."""
    if shutil.which("redis-server") is None:
        raise FileNotFoundError("redis-server is not installed (Debian: apt-get install redis-server; "
                                "make install-test installs it as root)")
    top = Path(tempfile.mkdtemp(prefix="reame-r"))  # unix socket paths must stay short
    unix_path = None if port else top / "redis.sock"
    where = ["--port", str(port), "--bind", "127.0.0.1"] if port else [
        "--port", "0", "--unixsocket", str(unix_path), "--unixsocketperm", "700"]
    argv = ["redis-server", *where, "--save", "", "--appendonly", "no", "--maxmemory", maxmemory,
            "--maxmemory-policy", "allkeys-lru", "--dir", str(top), *extra]
    with open(top / "redis.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent)
    server = RedisServer(proc, unix_path, port, reply_timeout_s)
    try:
        # Listening, not answering: a test may switch the default user off (ACL) or speak TLS only.
        deadline = time.monotonic() + START_TIMEOUT_S
        while proc.poll() is None and not server.listening():
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not listen in {START_TIMEOUT_S:.0f} s")
            time.sleep(0.1)
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited: {(top / 'redis.log').read_text()[-2000:]}")
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            server.thaw()
            proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(top)
