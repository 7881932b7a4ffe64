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
import contextlib
import threading
import time
from typing import Any

import openai

from reame.benchmarks.common import Progress, Setup, Timing, ask, chat, how
from reame.benchmarks.peers import LLAMA_SERVER, describe, missing_lines, serving
from reame.benchmarks.qa import QUESTIONS, documents
from reame.benchmarks.report import Section, median, percentile, plot, ratio, table
from reame.benchmarks.server import start_server

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
    sides = ["reame", *setup.peers]
    progress = Progress(len(sides) * rounds * count * per_doc, "load")
    walls = dict.fromkeys(sides, 0.0)
    timings: dict[str, list[Timing]] = {side: [] for side in sides}
    try:
        with contextlib.ExitStack() as stack:
            reame = start_server(setup.tmp / "load", workers, **setup.overrides(workers_threads="1"))
            stack.callback(reame.stop)
            clients = {"reame": reame.client(timeout=900)}
            for peer in setup.peers:
                # llama-server: one slot per client, its continuous batching; llama-cpp-python: one request at a time.
                clients[peer] = stack.enter_context(
                    serving(setup, peer, "load", threads=workers, slots=CLIENTS if peer == LLAMA_SERVER else 1))
            for r in range(rounds):
                for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                    wall, got = load_run(clients[side], documents(setup, count, QUICK_CHARS), per_doc, progress, side)
                    walls[side] += wall
                    timings[side] += got
    finally:
        progress.close()
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
    described = {peer: describe(peer, workers, slots=CLIENTS if peer == LLAMA_SERVER else 1) for peer in setup.peers}
    goal = []
    for peer in setup.peers:
        speed, p95 = ratio(figures["reame"][0], figures[peer][0]), ratio(figures["reame"][1], figures[peer][1])
        goal.append(f"reame/{peer} throughput {speed:.2f}x (goal >= 3: {'met' if speed >= 3 else 'NOT met'}), "
                    f"p95 latency {p95:.2f} of its (goal <= 0.33: {'met' if p95 <= 0.33 else 'NOT met'})")
    goal.append(f"reame read a document in full {fulls['reame']} times for {count * rounds} documents "
                f"(goal: once each: {'met' if fulls['reame'] == count * rounds else 'NOT met'})")
    goal += missing_lines(setup)

    def draw(axes: Any) -> None:
        for side in sides:
            name = f"reame ({workers} workers x 1 thread)" if side == "reame" else described[side]
            totals = sorted(t.total_s for t in timings[side])
            shares = [(i + 1) / len(totals) for i in range(len(totals))]
            axes.step([0.0, *totals], [0.0, *shares], where="post", label=name)
        axes.set_xlabel("request latency (s)")
        axes.set_ylabel("share of requests")
        axes.set_title(f"Latency CDF, {CLIENTS} clients over {count} documents")

    plots = [name for name in [plot(setup.out, "load_latency_cdf.png", draw)] if name]
    runs = (f"{CLIENTS} clients, {count} documents x {per_doc} questions per round, {rounds} round(s) on fresh "
            f"documents alternating the servers, {MAX_TOKENS} tokens each; reame {workers} workers x 1 thread")
    return Section("Concurrent load", goal, how(setup, runs, "; ".join(described.values())), [table(header, rows)],
                   plots)
