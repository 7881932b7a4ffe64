"""Run a real `reame serve` in a subprocess: used by `reame bench` and by the integration tests (tests/harness.py)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import openai

from reame.shared.lifecycle import die_with_parent

T = TypeVar("T")


def wait_for(predicate: Callable[[], T | None], timeout: float, interval: float, what: str) -> T:
    """Return ``predicate()``'s first truthy value; raise AssertionError if none comes within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


@dataclass
class Starts:
    """Servers this process started, and the workers among them (each one loads the model)."""

    servers: int = 0
    workers: int = 0


STARTS = Starts()  # the test run prints these at its end (tests/conftest.py)

READY_TIMEOUT_S = 120.0
RESTORED = " prompt tokens from cache entry "  # worker.prefix_cache's line for a restore
EXIT_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def descendants(pid: int) -> list[int]:
    """Every living process below ``pid``, found through /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: split after the last ')'.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, ppid in parents.items() if ppid == parent]
        found.extend(children)
        frontier.extend(children)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    tmp: Path
    # The openai clients handed out and not closed yet: stop() closes them (their pooled sockets).
    _clients: list[openai.OpenAI] = field(default_factory=list, repr=False, compare=False)
    _clients_lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def log_path(self) -> Path:
        return self.tmp / "serve.log"

    @property
    def run_dir(self) -> Path:
        return self.tmp / "run"

    @property
    def cache_dir(self) -> Path:
        return self.tmp / "cache"

    def children(self) -> list[int]:
        return descendants(self.proc.pid)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, api_key: str = "unused", **kwargs: Any) -> openai.OpenAI:
        """Return an openai client; it sends ``api_key`` as ``Authorization: Bearer``.

        Close it (``with server.client() as client:``) when done with it; stop() closes
        any still open, so a client used inline leaves no socket to the garbage collector.
        """
        client = openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0, **kwargs)
        with self._clients_lock:
            self._clients = [c for c in self._clients if not c.is_closed()]
            self._clients.append(client)
        return client

    def close_clients(self) -> None:
        """Close the clients client() handed out."""
        with self._clients_lock:
            clients, self._clients = self._clients, []
        for client in clients:
            client.close()

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        """Send one raw HTTP request; return status, headers and body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            # Header names are case-insensitive; the tests look them up in title case.
            headers = {name.title(): value for name, value in response.getheaders()}
            return response.status, headers, response.read()
        finally:
            conn.close()

    def post_json(self, path: str, payload: Any) -> tuple[int, dict[str, str], Any]:
        status, headers, body = self.request(
            "POST", path, json.dumps(payload).encode(), {"Content-Type": "application/json"}
        )
        return status, headers, json.loads(body)

    def cache_stats(self) -> dict[str, Any]:
        """`reame cache stats --json` against this server's cache directory (its cachekeeper's counters)."""
        env = {**os.environ, "REAME_SERVER_PORT": str(self.port), "REAME_SERVER_RUN_DIR": str(self.run_dir),
               "REAME_CACHE_DIR": str(self.cache_dir)}
        result = subprocess.run(
            [sys.executable, "-P", "-m", "reame.supervisor", "cache", "stats", "--json"],
            capture_output=True, text=True, timeout=120, env=env,
        )
        if result.returncode != 0:
            raise RuntimeError(f"reame cache stats failed: {result.stderr}")
        stats: dict[str, Any] = json.loads(result.stdout)
        return stats

    def ready(self) -> dict[str, Any] | None:
        try:
            status, _, body = self.request("GET", "/ready")
        except OSError:
            return None
        if status != 200:
            return None
        parsed: dict[str, Any] = json.loads(body)
        return parsed

    def wait_ready(self, workers: int, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        def ready_state() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"reame serve exited with {self.proc.returncode}:\n{self.log()}")
            state = self.ready()
            return state if state is not None and state.get("workers", 0) >= workers else None

        try:
            return wait_for(ready_state, timeout, interval=0.2, what=f"reame serve to be ready with {workers} workers")
        except AssertionError as err:
            raise RuntimeError(f"{err}:\n{self.log()}") from None

    def workers(self) -> list[int]:
        return [pid for pid in descendants(self.proc.pid) if " -m reame.worker " in cmdline(pid) + " "]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-20000:]

    def restores(self) -> list[str]:
        """The log's ``restored N of M prompt tokens ...`` lines, one per prefix a worker restored from the store.

        Each says where that restore's time went (lookup, transfer, decode, llama.cpp).
        The whole log, every start of this run dir included: a restart appends to it.
        """
        if not self.log_path.exists():
            return []
        lines = self.log_path.read_text(errors="replace").splitlines()
        return [line.split("reame.worker.prefix_cache: ")[-1] for line in lines if RESTORED in line]

    def stop(self) -> list[int]:
        """SIGTERM the server and wait; return the processes it left behind."""
        self.close_clients()
        family = descendants(self.proc.pid)
        stop_process(self.proc)
        # Children die with the supervisor (PR_SET_PDEATHSIG); a busy machine may take a while to reap them.
        with contextlib.suppress(AssertionError):
            wait_for(lambda: not any(alive(pid) for pid in family), EXIT_TIMEOUT_S, interval=0.1, what="the children")
        left = [pid for pid in family if alive(pid)]
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return left


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = EXIT_TIMEOUT_S) -> None:
    """SIGTERM ``proc`` unless it has exited, and wait; SIGKILL it if it is still there after ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_openai(proc: subprocess.Popen[bytes], base_url: str, timeout: float) -> bool:
    """Wait until the OpenAI server ``proc`` runs at ``base_url`` lists its models; False if it exits or times out."""
    deadline = time.monotonic() + timeout
    with openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=5) as client:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                client.models.list()
                return True
            except openai.APIError:
                time.sleep(0.3)
    return False


def spawn(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own, its output appended to ``log_path``.

    It is sent SIGTERM when this process dies: a test run or bench that dies without
    its teardown (a crash, kill -9) takes its servers with it.
    """
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=die_with_parent
        )


def start_server(tmp: Path, workers: int = 2, **overrides: str) -> Server:
    port = free_port()
    env = dict(os.environ)
    env.update(
        REAME_SERVER_PORT=str(port),
        REAME_SERVER_RUN_DIR=str(tmp / "run"),
        REAME_WORKERS_COUNT=str(workers),
        REAME_WORKERS_THREADS="1",
        REAME_SERVER_GATEWAY_THREADS="16",
        # Every test and benchmark client comes from 127.0.0.1: the per-address share of
        # threads (half by default) is for the public, not for a load test.
        REAME_SERVER_MAX_CONNECTIONS_PER_CLIENT="16",
        REAME_CACHE_DIR=str(tmp / "cache"),
        # Off unless a test asks for it: a repeated greedy request would otherwise be
        # answered from the answer cache, and the tests of the worker path would not reach it.
        REAME_CACHE_ANSWERS="false",
        # lossless, not the default auto, unless asked: auto answers a first question from its
        # excerpts and reads the document behind it, so the tests and scenarios of everything
        # else (the KV cache above all) would not see the prompts they send read as sent.
        REAME_COMPRESS_MODE="lossless",
    )
    env.update({f"REAME_{key.upper()}": value for key, value in overrides.items()})
    tmp.mkdir(parents=True, exist_ok=True)
    proc = spawn([sys.executable, "-P", "-m", "reame.supervisor", "serve"], env, tmp / "serve.log")
    STARTS.servers += 1
    STARTS.workers += workers
    server = Server(proc=proc, port=port, tmp=tmp)
    try:
        server.wait_ready(workers)
    except Exception:
        server.stop()
        raise
    return server
