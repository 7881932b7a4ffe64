"""Scenario `rag`: a retriever's documents in changing orders and company, as issue #28 measured it.

Three documents of the exam, two at a time in one user message after a system
prompt ([A,B], [B,C], [C,A], [A,C], [B,A]), a new question each time, greedy, each
document a text part of the content (what chunk mode reads by default, cache.chunks
= parts) or joined as LangChain's stuff-documents chain joins them (a blank line).
Each side runs the same requests on its own server, one after the other (never two
at once on the cores): reame with the documents as parts (one worker of every
thread; the same restarted before every request after the first, so the chunks
come from the store; and two workers of one thread each, lending threads), reame
with the documents joined in chunk mode (cache.chunks = on) and with prefix reuse
only (off), and llama.cpp's llama-server with `--cache-reuse` where one is built.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reame.benchmarks.common import Progress, Setup, Timing, ask, how
from reame.benchmarks.exam import INSTRUCTION, grade, load_exam
from reame.benchmarks.llama_server import flags
from reame.benchmarks.peers import LLAMA_SERVER, missing_lines, serving
from reame.benchmarks.report import Section, median, plot, ratio, table
from reame.benchmarks.server import Server, start_server

MAX_TOKENS = 32
QUICK_CHARS = 1500
STORE_WAIT_S = 120.0
PEER_N_CTX = 8192
ORDERS = ((0, 1), (1, 2), (2, 0), (0, 2), (1, 0))
SYSTEM = "Answer the question using only the documents the user gives. Be brief."
PARTS = "reame, documents as parts"
RESTARTED = "reame, parts, restarted before each request"
TWO_WORKERS = "reame, parts, 2 workers x 1 thread"
JOINED = "reame, documents joined, cache.chunks = on"
PREFIX = "reame, documents joined, prefix reuse only"
CHUNKED = (PARTS, RESTARTED, TWO_WORKERS, JOINED)
WARM_UP = [{"role": "user", "content": "Say hello."}]


def run(setup: Setup) -> Section:
    docs, questions = load_exam(setup.exam, quick=False)
    docs = three(docs, QUICK_CHARS if setup.quick else 0)
    names = list(docs)
    orders = ORDERS[:2] if setup.quick else ORDERS
    # A new question each time, about the first document of the pair where the exam has one.
    asked = [next((q for q in questions[i:] + questions if q.doc == names[pair[0]]), questions[i % len(questions)])
             for i, pair in enumerate(orders)]
    requests = [messages([docs[names[i]] for i in pair], q.question) for pair, q in zip(orders, asked, strict=True)]
    in_parts = [messages([docs[names[i]] for i in pair], q.question, parts=True)
                for pair, q in zip(orders, asked, strict=True)]
    sides: dict[str, Callable[[Progress], list[Timing]]] = {
        PARTS: lambda progress: on_reame(setup, "parts", in_parts, progress, "parts"),
        RESTARTED: lambda progress: on_reame(setup, "restarted", in_parts, progress, "parts", restart=True),
        TWO_WORKERS: lambda progress: on_reame(setup, "two", in_parts, progress, "parts", workers=2),
        JOINED: lambda progress: on_reame(setup, "joined", requests, progress, "on"),
        PREFIX: lambda progress: on_reame(setup, "prefix", requests, progress, "off"),
    }
    if LLAMA_SERVER in setup.peers:
        sides["llama-server"] = lambda progress: on_llama_server(setup, requests, progress)
    progress = Progress(len(sides) * len(requests), "rag")
    try:
        timings = {side: go(progress) for side, go in sides.items()}
    finally:
        progress.close()
    correct = {side: sum(grade(q, t.text) == "OK" for q, t in zip(asked, ts, strict=True))
               for side, ts in timings.items()}
    return report(setup, names, orders, timings, correct)


def three(docs: dict[str, str], most: int) -> dict[str, str]:
    """The exam's first three documents (at most ``most`` characters each, 0: whole), or its text in thirds."""
    if len(docs) >= 3:
        return {name: text[:most] if most else text for name, text in list(docs.items())[:3]}
    paragraphs = "\n\n".join(docs.values()).split("\n\n")
    size = -(-len(paragraphs) // 3)
    parts = ["\n\n".join(paragraphs[i * size : (i + 1) * size]) for i in range(3)]
    return {f"part {i + 1}": part[:most] if most else part for i, part in enumerate(parts)}


def messages(documents: list[str], question: str, parts: bool = False) -> list[dict[str, Any]]:
    """The request: the documents joined by blank lines, or (``parts``) each a text part of its own."""
    final = f"Question: {question} {INSTRUCTION}"
    if parts:
        content: Any = [{"type": "text", "text": document.strip() + "\n\n"} for document in documents]
        content.append({"type": "text", "text": final})
    else:
        content = "\n\n".join(document.strip() for document in documents) + f"\n\n{final}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]


def on_reame(
    setup: Setup, name: str, requests: list[list[dict[str, Any]]], progress: Progress, chunks: str,
    restart: bool = False, workers: int = 1,
) -> list[Timing]:
    """Ask ``requests`` in turn of one reame server (``workers`` sharing the threads), or a new one for each."""
    threads = max(1, setup.threads // workers)
    overrides = setup.overrides(workers_threads=str(threads), cache_chunks=chunks)
    timings: list[Timing] = []
    server: Server | None = None
    cache = setup.tmp / f"rag-{name}-cache"
    read = 0
    try:
        for i, request in enumerate(requests):
            if server is None or (restart and i > 0):
                if server is not None:
                    wait_stored(cache, read)  # a stop drops the saves still queued
                    server.stop()
                server = start_server(setup.tmp / f"rag-{name}-{i}", workers, **overrides, cache_dir=str(cache))
                ask(server.client(), WARM_UP, 1)  # the gateway's tokenizer loads on the first request
            timings.append(ask(server.client(timeout=900), request, MAX_TOKENS))
            read += timings[-1].chunks.get("read", 0)
            progress.step(name)
    finally:
        if server is not None:
            server.stop()
    return timings


def wait_stored(cache: Path, count: int) -> None:
    """Wait until the store holds ``count`` entries (saves are queued after the reply), at most STORE_WAIT_S."""
    deadline = time.monotonic() + STORE_WAIT_S
    while len(list(cache.glob("*.kv"))) < count and time.monotonic() < deadline:
        time.sleep(0.2)


def on_llama_server(setup: Setup, requests: list[list[dict[str, Any]]], progress: Progress) -> list[Timing]:
    # Its prompts are the documents as sent (reame's are after lossless compression): more room.
    timings = []
    with serving(setup, LLAMA_SERVER, "rag", n_ctx=max(setup.n_ctx, PEER_N_CTX)) as client:
        for request in requests:
            timings.append(ask(client, request, MAX_TOKENS))
            progress.step("llama-server")
    return timings


def report(
    setup: Setup, names: list[str], orders: tuple[tuple[int, int], ...], timings: dict[str, list[Timing]],
    correct: dict[str, int],
) -> Section:
    label = ["".join("ABC"[i] for i in pair) for pair in orders]
    rows: list[list[Any]] = []
    later_ttft: dict[str, float] = {}
    later_share: dict[str, float] = {}
    for side, ts in timings.items():
        later = ts[1:]
        cached = sum(t.cached_tokens or 0 for t in later)
        prompt = sum(t.prompt_tokens or 0 for t in later)
        later_ttft[side] = median([t.ttft_s for t in later])
        later_share[side] = cached / prompt if prompt else 0.0
        rows.append([side, ts[0].ttft_s, f"{cached:,} / {prompt:,} ({later_share[side]:.0%})", later_ttft[side],
                     f"{correct[side]} of {len(ts)}"])
    header = ["side", "first request TTFT s", "later requests: cached / prompt tokens", "later median TTFT s",
              "correct"]
    per_request = [[side, *[f"{t.ttft_s:.2f} s, {t.cached_tokens or 0}/{t.prompt_tokens or 0}" for t in ts]]
                   for side, ts in timings.items()]
    peer = later_ttft.get("llama-server")
    goal = []
    for side in CHUNKED:
        line = f"{side}: later requests' cached tokens {later_share[side]:.0%} of their prompt (goal >= 85%)"
        if peer:
            share = ratio(later_ttft[side], peer)
            verdict = "met" if share <= 0.25 else "NOT met"
            line += f", later median TTFT {share:.3f} of llama-server's (goal <= 0.25: {verdict})"
        goal.append(line)
    goal += missing_lines(setup, (LLAMA_SERVER,))
    goal.append(f"documents as parts against prefix reuse only: later median TTFT "
                f"{ratio(later_ttft[PARTS], later_ttft[PREFIX]):.3f}")

    def draw(axes: Any) -> None:
        xs = list(range(1, len(label) + 1))
        for side, ts in timings.items():
            axes.plot(xs, [t.ttft_s for t in ts], "o-", label=side)
        axes.set_xticks(xs, label)
        axes.set_ylabel("time to first token (s)")
        axes.set_title("Two of three documents per request, in changing orders")

    plots = [name for name in [plot(setup.out, "rag_ttft.png", draw)] if name]
    runs = (f"documents A, B, C = {', '.join(names)} (exam), two per request in the orders {', '.join(label)}, "
            f"a new exam question each, {MAX_TOKENS} tokens, greedy, streamed; each side on its own server "
            "(1 worker of every thread unless said), one after the other")
    extra = f"llama-server {flags(setup.threads)}" if peer else ""
    tables = [table(header, rows), table(["side", *label], per_request)]
    return Section("Documents in changing orders and company", goal, how(setup, runs, extra), tables, plots)
