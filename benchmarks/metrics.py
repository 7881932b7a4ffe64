"""Scenario `metrics`: how long a /metrics scrape takes, idle and while streams run (issue #13).

`reame serve` with max(2, --threads) workers of one thread and two gunicorn processes
is scraped --rounds times (default 40) idle, then as often while 8 streaming chat
completions run, each started again when it ends (most of them queued behind the
workers). Each scrape also asks the dispatcher and the cachekeeper for their figures,
so a busy dispatcher shows. Goal: a scrape takes under 100 ms at the median with the
8 streams running. reame alone: the peer has no such endpoint to compare.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import openai

from reame.benchmarks.common import Progress, Setup, how
from reame.benchmarks.report import Cell, Section, median, percentile, table
from reame.benchmarks.server import Server, start_server

SCRAPES = 40
QUICK_SCRAPES = 3
STREAMS = 8
QUICK_STREAMS = 2
MAX_TOKENS = 64
QUICK_MAX_TOKENS = 8
PAUSE_S = 0.05  # between scrapes under load, as a monitoring system's scrapes are spaced
OPEN_TIMEOUT_S = 300.0
GOAL_MS = 100.0


def scrape_ms(server: Server) -> float:
    begin = time.perf_counter()
    status, _, _ = server.request("GET", "/metrics")
    elapsed = (time.perf_counter() - begin) * 1000
    if status != 200:
        raise RuntimeError(f"GET /metrics answered {status}")
    return elapsed


class Streams:
    """``count`` streaming chat completions kept running, each sent again when it ends, until stop()."""

    def __init__(self, server: Server, count: int, max_tokens: int) -> None:
        self._stop = threading.Event()
        self._opened = [threading.Event() for _ in range(count)]
        self.errors: list[BaseException] = []
        self._threads = [threading.Thread(target=self._loop, args=(server.client(timeout=900), i, max_tokens),
                                          daemon=True) for i in range(count)]

    def start(self) -> None:
        """Start every stream; return once each has had its 200 (queued or generating)."""
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        for opened in self._opened:
            if not opened.wait(max(0.0, deadline - time.monotonic())):
                raise RuntimeError(f"the streams did not all start within {OPEN_TIMEOUT_S:g} s")
        if self.errors:
            raise RuntimeError(f"a stream failed: {self.errors[0]}") from self.errors[0]

    def stop(self) -> None:
        """Tell the streams to end; stopping the server ends those still waiting for a token."""
        self._stop.set()

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=30)

    def _loop(self, client: openai.OpenAI, index: int, max_tokens: int) -> None:
        try:
            while not self._stop.is_set():
                stream = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"Tell story number {index}."}],
                    max_tokens=max_tokens, stream=True,
                )
                self._opened[index].set()
                with stream:
                    for _ in stream:
                        if self._stop.is_set():
                            break
        except Exception as err:  # the server stopped under it, or a real failure start() reports
            if not self._stop.is_set():
                self.errors.append(err)
        finally:
            self._opened[index].set()


def run(setup: Setup) -> Section:
    scrapes = setup.rounds or (QUICK_SCRAPES if setup.quick else SCRAPES)
    count, max_tokens = (QUICK_STREAMS, QUICK_MAX_TOKENS) if setup.quick else (STREAMS, MAX_TOKENS)
    workers = max(2, setup.threads)
    progress = Progress(2 * scrapes, "metrics")
    server = start_server(setup.tmp / "metrics", workers,
                          **setup.overrides(workers_threads="1", server_gateway_processes="2"))
    idle: list[float] = []
    busy: list[float] = []
    streams = Streams(server, count, max_tokens)
    try:
        for _ in range(scrapes):
            idle.append(scrape_ms(server))
            progress.step("idle")
        streams.start()
        for _ in range(scrapes):
            busy.append(scrape_ms(server))
            progress.step(f"{count} streams")
            time.sleep(PAUSE_S)
        if streams.errors:
            raise RuntimeError(f"a stream failed while scraping: {streams.errors[0]}") from streams.errors[0]
    finally:
        streams.stop()
        progress.close()
        server.stop()
        streams.join()
    return report(setup, idle, busy, count, workers)


def row(label: str, values: Sequence[float]) -> list[Cell]:
    """Scrapes, median, p90 and max, in milliseconds."""
    return [label, len(values), median(values), percentile(values, 0.9), max(values, default=float("nan"))]


def report(setup: Setup, idle: Sequence[float], busy: Sequence[float], streams: int, workers: int) -> Section:
    header = ["server", "scrapes", "median ms", "p90 ms", "max ms"]
    rows = [row("idle", idle), row(f"{streams} streams running", busy)]
    loaded, p90 = median(busy), percentile(busy, 0.9)
    goal = [f"with {streams} streams running a scrape takes {loaded:.1f} ms at the median, {p90:.1f} ms at p90 "
            f"(goal: median < {GOAL_MS:g} ms: {'met' if loaded < GOAL_MS else 'NOT met'})"]
    runs = (f"{len(idle)} scrapes of /metrics idle, then {len(busy)} {PAUSE_S * 1000:g} ms apart while {streams} "
            f"streaming chat completions run, each sent again when it ends; reame {workers} workers x 1 thread, "
            "2 gunicorn processes")
    return Section("Scraping /metrics under load", goal, how(setup, runs), [table(header, rows, digits=1)])
