"""What every scenario of `reame bench` shares: the set-up, the peer server, one timed request, progress."""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

from reame.benchmarks.server import Server, free_port, spawn, start_server, stop_process, wait_openai

PEER_START_TIMEOUT_S = 180.0
# The peer's prompt cache (llama_cpp.server --cache) counts llama.cpp's state against its
# cache_size but not the n_batch x n_vocab floats of logits each entry also copies (311 MB
# with a 151k vocabulary): at its default 2 GiB a 1.5B Qwen compress run grew 3 GB a
# document. 512 MiB still holds a dozen entries of 2,000-token prompts, more than any
# scenario revisits (4 documents at most).
PEER_CACHE_BYTES = 512 << 20
PEER_CACHE_FLAGS = ("--cache", "true", "--cache_size", str(PEER_CACHE_BYTES))


@dataclass(frozen=True)
class Setup:
    """The options of one `reame bench` run, resolved."""

    model: Path
    draft_model: Path | None
    exam: Path
    out: Path
    threads: int
    quick: bool
    n_ctx: int
    tmp: Path
    llama_server: Path | None = None  # llama.cpp's server binary, where one is built (benchmarks.llama_server)
    peers: tuple[str, ...] = ()  # the peers to run (benchmarks.peers.choose: --peer, else every one found)
    limit: int = 0  # at most this many exam questions a document in rag-exam and exam (0: all)
    rounds: int = 0  # rounds of the scenarios that repeat their measurement (0: the scenario's own default)
    modes: tuple[str, ...] = ()  # exam: the compression modes, in this order (empty: the scenario's own)
    sides: tuple[str, ...] = ()  # rag-exam: how each question is read (empty: every way)
    settle: bool = False  # exam: wait before each question until the server has nothing running
    hard: bool = False  # exam: also ask benchmarks/hard_questions.jsonl's questions about the exam's documents

    def overrides(self, **extra: str) -> dict[str, str]:
        """Configuration overrides for a reame server on this run's model (REAME_<SECTION>_<KEY>)."""
        return {"model_path": str(self.model), **extra}


def cpu_model() -> str:
    """The CPU's name from /proc/cpuinfo (x86 `model name`, or ARM's fields), else what platform says."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    for key in ("model name", "Model", "Hardware", "cpu model", "uarch"):
        if fields.get(key):
            return fields[key]
    if fields.get("CPU implementer"):
        return f"ARM implementer {fields['CPU implementer']} part {fields.get('CPU part', '?')}"
    return platform.processor() or platform.machine()


def memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return 0.0


def machine() -> str:
    """One line saying where the figures were taken."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    from importlib.metadata import version

    return (f"{platform.node()}: {cpu_model()}, {os.cpu_count()} CPUs, {memory_gib():.0f} GiB, "
            f"{platform.machine()}, load average {load:.1f}; Python {platform.python_version()}, "
            f"llama-cpp-python {version('llama-cpp-python')}")


def how(setup: Setup, runs: str, extra: str = "") -> str:
    """How a scenario's figures were taken: machine, model, threads, runs."""
    text = f"{machine()}. Model {setup.model.name}, {setup.threads} thread(s), {runs}"
    return text + (f"; {extra}" if extra else "") + (" (--quick: a smoke run, not a measurement)." if setup.quick
                                                     else ".")


def nonce() -> str:
    return f"Reference {uuid.uuid4().hex[:8]}.\n\n"


@dataclass
class Timing:
    """One streamed chat request as the client saw it."""

    ttft_s: float
    total_s: float
    tokens: int  # usage.completion_tokens if the server sends usage, else the content chunks
    decode_tps: float  # tokens after the first, per second from the first to the last
    cached_tokens: int | None
    prompt_tokens: int | None
    text: str
    draft_tokens: int = 0  # usage.reame's speculative counts (reame only)
    accepted_draft_tokens: int = 0
    chunks: dict[str, int] = field(default_factory=dict)  # usage.reame.chunks (chunk mode)
    compression: str = ""  # usage.reame.compression: the mode the gateway applied (query: excerpts only)


def ask(client: openai.OpenAI, messages: list[dict[str, Any]], max_tokens: int, **extra: Any) -> Timing:
    """Stream one greedy chat completion; time the first token, the last and the whole."""
    start = time.perf_counter()
    first = last = 0.0
    chunks = 0
    parts: list[str] = []
    usage = None
    timings: dict[str, Any] = {}  # llama-server's own counts (cache_n: prompt tokens it reused)
    create: Any = client.chat.completions.create  # the messages are plain dicts, not the client's TypedDicts
    stream = create(
        model="m", messages=messages, temperature=0, max_tokens=max_tokens,
        stream=True, stream_options={"include_usage": True}, **extra,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
            chunks += 1
            parts.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
        extra = chunk.model_extra or {}
        if isinstance(extra.get("timings"), dict):
            timings = extra["timings"]
    end = time.perf_counter()
    tokens = usage.completion_tokens if usage is not None else chunks
    details = usage.prompt_tokens_details if usage is not None else None
    decode = (tokens - 1) / (last - first) if tokens > 1 and last > first else 0.0
    ours = (usage.model_extra or {}).get("reame") if usage is not None else None
    drafts = ours if isinstance(ours, dict) else {}
    cached = details.cached_tokens if details is not None else None
    if "cache_n" in timings:
        cached = int(timings["cache_n"])
    return Timing((first or end) - start, end - start, tokens, decode, cached,
                  usage.prompt_tokens if usage is not None else None, "".join(parts),
                  int(drafts.get("draft_tokens", 0)), int(drafts.get("accepted_draft_tokens", 0)),
                  drafts.get("chunks") or {}, str(drafts.get("compression", "")))


def chat(document: str, question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": document}, {"role": "user", "content": question}]


@dataclass
class Peer:
    """llama-cpp-python's own OpenAI server (``python -m llama_cpp.server``) on the same model and threads."""

    model: Path
    threads: int
    n_ctx: int
    log: Path
    extra: tuple[str, ...] = PEER_CACHE_FLAGS
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    clients: list[openai.OpenAI] = field(default_factory=list, repr=False)  # closed by stop()

    def launch(self) -> None:
        # llama_cpp.server computes logits for every prompt token by default (logits_all), which
        # slows its prefill and makes each entry of its prompt cache copy n_ctx x n_vocab floats
        # that its cache_size does not count (2.5 GB with a 151k vocabulary: a 1.5B Qwen run grew
        # to 22 GB and was killed); like reame, it gets logits for the last token only.
        args = [sys.executable, "-m", "reame.benchmarks.peer_server", "--model", str(self.model),
                "--n_ctx", str(self.n_ctx), "--n_threads", str(self.threads), "--n_threads_batch",
                str(self.threads), "--logits_all", "false", *self.extra,
                "--host", "127.0.0.1", "--port", str(self.port)]
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.proc = spawn(args, dict(os.environ), self.log)

    def wait(self) -> None:
        if self.proc is not None and wait_openai(self.proc, self.base_url, PEER_START_TIMEOUT_S):
            return
        tail = self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
        self.stop()
        raise RuntimeError(f"python -m llama_cpp.server did not start (needs `pip install 'reame[bench]'`):\n{tail}")

    def stop(self) -> None:
        for client in self.clients:
            client.close()
        self.clients.clear()
        stop_process(self.proc)
        self.proc = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def client(self, timeout: float = 900) -> openai.OpenAI:
        """Return an openai client to the peer; stop() closes it."""
        client = openai.OpenAI(base_url=self.base_url, api_key="x", max_retries=0, timeout=timeout)
        self.clients.append(client)
        return client


@contextmanager
def both(setup: Setup, name: str, workers: int, peer: Peer, **overrides: str) -> Iterator[tuple[Server, Peer]]:
    """Start reame (``workers`` workers) and the peer side by side; stop both at the end."""
    peer.launch()
    server: Server | None = None
    try:
        server = start_server(setup.tmp / name, workers=workers, **setup.overrides(**overrides))
        peer.wait()
        yield server, peer
    finally:
        if server is not None:
            server.stop()
        peer.stop()


class Progress:
    """A progress bar: tqdm's if it is installed, else a plain line per step on standard error."""

    def __init__(self, total: int, description: str) -> None:
        self.total, self.description, self.done = total, description, 0
        self._bar: Any = None
        try:
            tqdm = importlib.import_module("tqdm").tqdm
            self._bar = tqdm(total=total, desc=description, unit="req", leave=True, file=sys.stderr)
        except ImportError:
            print(f"{description}: {total} steps (install tqdm for a progress bar)", file=sys.stderr, flush=True)

    def step(self, label: str = "") -> None:
        self.done += 1
        if self._bar is not None:
            self._bar.set_postfix_str(label[:40], refresh=False)
            self._bar.update(1)
        else:
            print(f"  [{self.done}/{self.total}] {self.description} {label}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
