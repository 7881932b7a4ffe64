"""Time to first token cold, warm and after a restart: reame against llama-cpp-python's server.

A document of about 2,000 tokens is asked several questions through the openai
client, streamed, on both servers in the same run (the questions alternate between
them, so machine noise hits both alike), with the same model and threads:

- reame: ``reame serve`` with one worker of ``--threads`` threads and a fresh store;
- peer: ``python -m llama_cpp.server --cache true`` (an in-memory prompt cache).

Then both servers are restarted and asked once more. Each run prefixes the
document with a fresh nonce, so nothing is warm from an earlier run.

    .venv/bin/python -m bench.bench_cache [--model PATH] [--threads 2] [--doc FILE]

Needs llama-cpp-python's server extra: ``pip install 'llama-cpp-python[server]'``.
A benchmark, not a test: it prints figures and ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import openai

from reame.benchmarks.server import Server, free_port, start_server
from reame.shared.config import load
from reame.shared.model_file import model_path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DOC = REPO.parent / "shared" / "eval" / "docs" / "bike_rental_terms.txt"
QUESTIONS = [
    "What is the price of the cheapest rental?",
    "What happens if a bike is returned late?",
    "Is a deposit required?",
    "What are the opening hours?",
    "Who do I call in an emergency?",
]
AFTER_RESTART = "Can children rent bikes?"
MAX_TOKENS = 8


@dataclass
class Timing:
    ttft_s: float
    total_s: float
    cached_tokens: int | None


class Peer:
    """llama-cpp-python's own OpenAI server with its prompt cache on."""

    def __init__(self, model: str, threads: int, n_ctx: int, log: Path) -> None:
        self.port = free_port()
        self._args = [
            sys.executable, "-m", "reame.benchmarks.peer_server", "--model", model, "--n_ctx", str(n_ctx),
            "--n_threads", str(threads), "--n_threads_batch", str(threads), "--cache", "true",
            "--host", "127.0.0.1", "--port", str(self.port),
        ]
        self._log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self._log, "ab") as log:
            self.proc = subprocess.Popen(self._args, stdout=log, stderr=subprocess.STDOUT)
        client = self.client()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                client.models.list()
                return
            except openai.APIConnectionError:
                time.sleep(0.3)
        raise RuntimeError(f"llama_cpp.server did not start; see {self._log}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(30)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key="x", max_retries=0)


def ask(client: openai.OpenAI, document: str, question: str) -> Timing:
    start = time.perf_counter()
    first = 0.0
    cached: int | None = None
    stream = client.chat.completions.create(
        model="m", temperature=0, max_tokens=MAX_TOKENS, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": document}, {"role": "user", "content": question}],
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content and not first:
            first = time.perf_counter()
        if chunk.usage is not None and chunk.usage.prompt_tokens_details is not None:
            cached = chunk.usage.prompt_tokens_details.cached_tokens
    total = time.perf_counter() - start
    return Timing((first or time.perf_counter()) - start, total, cached)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF path (default: the embedded SmolLM2-135M)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--doc", type=Path, default=DEFAULT_DOC, help="the document (default: an eval document)")
    args = parser.parse_args()

    environ = {"REAME_MODEL_PATH": args.model} if args.model else {}
    config = load(None, environ=environ)
    path = str(model_path(config))
    document = f"Reference {uuid.uuid4().hex[:8]}.\n" + args.doc.read_text(encoding="utf-8")
    overrides = {"workers_threads": str(args.threads), **({"model_path": args.model} if args.model else {})}

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        peer = Peer(path, args.threads, config.model.n_ctx, tmp / "peer.log")
        peer.start()
        reame: Server = start_server(tmp, workers=1, **overrides)
        rows: list[tuple[str, Timing, Timing]] = []
        try:
            for i, question in enumerate(QUESTIONS):
                label = "cold" if i == 0 else f"warm {i}"
                ours = ask(reame.client(), document, question)
                theirs = ask(peer.client(), document, question)
                rows.append((label, ours, theirs))
            reame.stop()
            peer.stop()
            reame = start_server(tmp, workers=1, **overrides)
            peer.start()
            rows.append(("after restart", ask(reame.client(), document, AFTER_RESTART),
                         ask(peer.client(), document, AFTER_RESTART)))
        finally:
            reame.stop()
            peer.stop()

    cold_ours, cold_theirs = rows[0][1].ttft_s, rows[0][2].ttft_s
    print(f"model: {Path(path).name}, threads: {args.threads}, document: {args.doc.name}, "
          f"max_tokens: {MAX_TOKENS}, host: {os.uname().nodename}")
    print(f"{'request':15}{'reame TTFT':>12}{'/cold':>8}{'total':>9}{'cached':>8}"
          f"{'peer TTFT':>12}{'/cold':>8}{'total':>9}")
    for label, ours, theirs in rows:
        print(f"{label:15}{ours.ttft_s:12.3f}{ours.ttft_s / cold_ours:8.3f}{ours.total_s:9.3f}"
              f"{ours.cached_tokens if ours.cached_tokens is not None else '-':>8}"
              f"{theirs.ttft_s:12.3f}{theirs.ttft_s / cold_theirs:8.3f}{theirs.total_s:9.3f}")
    warm_ours = statistics.median(r[1].ttft_s for r in rows[1:-1])
    warm_theirs = statistics.median(r[2].ttft_s for r in rows[1:-1])
    total_ours = statistics.median(r[1].total_s for r in rows[1:-1])
    total_theirs = statistics.median(r[2].total_s for r in rows[1:-1])
    print(f"median warm TTFT: reame {warm_ours:.3f} s ({cold_ours / warm_ours:.1f}x faster than cold), "
          f"peer {warm_theirs:.3f} s ({cold_theirs / warm_theirs:.1f}x)")
    print(f"median warm total: reame {total_ours:.3f} s, peer {total_theirs:.3f} s")
    print(f"after restart TTFT: reame {rows[-1][1].ttft_s:.3f} s ({rows[-1][1].ttft_s / cold_ours:.3f} of cold), "
          f"peer {rows[-1][2].ttft_s:.3f} s ({rows[-1][2].ttft_s / cold_theirs:.3f} of cold)")


if __name__ == "__main__":
    main()
