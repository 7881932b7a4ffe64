"""Scenario `load`: 8 clients ask questions over 4 documents at once, of reame and of the peers.

reame runs --threads workers of one thread each (its default shape: one worker per
core); llama-cpp-python's server one process of --threads threads with its prompt cache
on; llama.cpp's llama-server (where one is built) one slot per client (`-np 8`, its
continuous batching) with its prompt cache and `--cache-reuse`. The load runs in rounds,
each on fresh documents, rotating which server goes first.
Goal: reame's throughput at least 3x llama-cpp-python's, its p95 latency at most a third;
against llama-server the same ratios are reported.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any

import openai

from reame.benchmarks.common import Peer, Progress, Setup, Timing, ask, both, chat, how
from reame.benchmarks.llama_server import LlamaServer, flags
from reame.benchmarks.qa import QUESTIONS, documents
from reame.benchmarks.report import Section, median, percentile, plot, ratio, table

CLIENTS = 8
MAX_TOKENS = 16
QUICK_CHARS = 800  # --quick: short documents, a few seconds of prefill each


def load_run(client: openai.OpenAI, docs: list[str], per_doc: int, progress: Progress,
             side: str) -> tuple[float, list[Timing]]:
    """Ask ``per_doc`` questions about each document from CLIENTS threads, interleaved; return wall time, timings."""
    jobs = [(doc, QUESTIONS[q % len(QUESTIONS)]) for q in range(per_doc) for doc in docs]
    lock = threading.Lock()

    def one(job: tuple[str, str]) -> Timing:
        timing = ask(client, chat(*job), MAX_TOKENS)
        with lock:
            progress.step(side)
        return timing

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        timings = list(pool.map(one, jobs))
    return time.perf_counter() - started, timings


def run(setup: Setup) -> Section:
    count, per_doc, rounds = (2, 1, 1) if setup.quick else (4, 3, 2)
    workers = setup.threads
    sides = ["reame", "peer", *(["llama-server"] if setup.llama_server is not None else [])]
    progress = Progress(len(sides) * rounds * count * per_doc, "load")
    peer = Peer(setup.model, workers, setup.n_ctx, setup.tmp / "load-peer.log")
    walls = dict.fromkeys(sides, 0.0)
    timings: dict[str, list[Timing]] = {side: [] for side in sides}
    llama: LlamaServer | None = None
    try:
        with both(setup, "load", workers, peer, workers_threads="1") as (reame, _):
            clients = {"reame": reame.client(timeout=900), "peer": peer.client()}
            if setup.llama_server is not None:
                llama = LlamaServer(setup.llama_server, setup.model, workers, setup.n_ctx,
                                    setup.tmp / "load-llama-server.log", slots=CLIENTS)
                llama.start()
                clients["llama-server"] = llama.client()
            for r in range(rounds):
                for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                    wall, got = load_run(clients[side], documents(setup, count, QUICK_CHARS), per_doc, progress, side)
                    walls[side] += wall
                    timings[side] += got
    finally:
        progress.close()
        if llama is not None:
            llama.stop()
    rows: list[list[Any]] = []
    figures: dict[str, tuple[float, float]] = {}
    fulls: dict[str, int | None] = {}
    for side in sides:
        got = timings[side]
        totals = [t.total_s for t in got]
        rate = len(got) / walls[side]
        figures[side] = (rate, percentile(totals, 0.95))
        # A chat template's opening tokens may be reused from any earlier prompt: under 50 cached is a full read.
        fulls[side] = (sum(1 for t in got if t.cached_tokens is not None and t.cached_tokens < 50)
                       if got and got[0].cached_tokens is not None else None)
        rows.append([side, len(got), rate, median(totals), percentile(totals, 0.95),
                     median([t.ttft_s for t in got]), fulls[side]])
    header = ["server", "requests", "req/s", "p50 latency s", "p95 latency s", "p50 TTFT s", "full prefills"]
    speed = ratio(figures["reame"][0], figures["peer"][0])
    p95 = ratio(figures["reame"][1], figures["peer"][1])
    goal = [f"reame/peer throughput {speed:.2f}x (goal >= 3: {'met' if speed >= 3 else 'NOT met'})",
            f"reame's p95 latency is {p95:.2f} of the peer's (goal <= 0.33: {'met' if p95 <= 0.33 else 'NOT met'})",
            f"reame read a document in full {fulls['reame']} times for {count * rounds} documents "
            f"(goal: once each: {'met' if fulls['reame'] == count * rounds else 'NOT met'})"]
    if "llama-server" in figures:
        theirs = figures["llama-server"]
        goal.append(f"against llama-server ({CLIENTS} slots): throughput {ratio(figures['reame'][0], theirs[0]):.2f}x, "
                    f"p95 latency {ratio(figures['reame'][1], theirs[1]):.2f} of its")
    else:
        goal.append("llama-server not found (build it with `make peer`, or pass --llama-server): no ratio to it")

    def draw(axes: Any) -> None:
        names = {"reame": f"reame ({workers} workers x 1 thread)",
                 "peer": f"llama_cpp.server --cache true ({workers} threads)",
                 "llama-server": f"llama-server {flags(workers, CLIENTS)}"}
        for side in sides:
            name = names[side]
            totals = sorted(t.total_s for t in timings[side])
            shares = [(i + 1) / len(totals) for i in range(len(totals))]
            axes.step([0.0, *totals], [0.0, *shares], where="post", label=name)
        axes.set_xlabel("request latency (s)")
        axes.set_ylabel("share of requests")
        axes.set_title(f"Latency CDF, {CLIENTS} clients over {count} documents")

    plots = [name for name in [plot(setup.out, "load_latency_cdf.png", draw)] if name]
    runs = (f"{CLIENTS} clients, {count} documents x {per_doc} questions per round, {rounds} round(s) on fresh "
            f"documents alternating the servers, {MAX_TOKENS} tokens each; reame {workers} workers x 1 thread, "
            f"peer 1 process x {workers} threads with `--cache true`")
    extra = f"llama-server {flags(workers, CLIENTS)}" if "llama-server" in figures else ""
    return Section("Concurrent load", goal, how(setup, runs, extra), [table(header, rows)], plots)
