"""Scenario `answers`: a repeated greedy request, fresh (worker) against an answer cache hit (issue #19).

Starts `reame serve` with the answer cache on, then for each of N distinct questions
about one document asks once with ``"reame": {"answer_cache": false}`` (a fresh
generation; the document's KV state is reused after the first, as in production) and
once more after its answer is stored (a hit). Goal: a hit answers in at most 20 ms
at the median, streamed or not. No peer: llama-cpp-python has no answer cache.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

from reame.benchmarks.common import Progress, Setup, how
from reame.benchmarks.report import Cell, Section, median, table
from reame.benchmarks.server import Server, start_server

REQUESTS = 15
QUICK_REQUESTS = 2
MAX_TOKENS = 48
GOAL_MS = 20.0
HIT_POLLS = 50  # the answer is stored just after its reply: at most a moment later
DOCUMENT = " ".join(
    f"Section {i}. The Harbour Street office opens at 8:30 and closes at 17:45 on weekdays; "
    f"a bike costs {10 + i} euros per day, helmets are free and locks cost 2 euros per day."
    for i in range(12)
)


def ask_ms(server: Server, payload: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """Send one request and read the whole answer; return the milliseconds and the JSON body (None if streamed).

    Plain http.client, not the openai client: its own overhead would be a large share of a 20 ms hit.
    """
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    try:
        begin = time.perf_counter()
        connection.request("POST", "/v1/chat/completions", json.dumps(payload).encode(),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        raw = response.read()
        elapsed = (time.perf_counter() - begin) * 1000
    finally:
        connection.close()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {raw[:200]!r}")
    body: dict[str, Any] | None = None if payload.get("stream") else json.loads(raw)
    return elapsed, body


def payload(i: int) -> dict[str, Any]:
    return {"model": "m", "temperature": 0, "max_tokens": MAX_TOKENS,
            "messages": [{"role": "system", "content": DOCUMENT},
                         {"role": "user", "content": f"Question {i}: what does a bike cost in section {i}?"}]}


def run(setup: Setup) -> Section:
    requests = QUICK_REQUESTS if setup.quick else REQUESTS
    times: dict[str, list[float]] = {"fresh (worker)": [], "hit (JSON)": [], "hit (streamed)": []}
    progress = Progress(requests, "answers")
    server = start_server(setup.tmp / "answers", 1,
                          **setup.overrides(cache_answers="true", workers_threads=str(setup.threads)))
    try:
        for i in range(requests):
            request = payload(i)
            elapsed, body = ask_ms(server, {**request, "reame": {"answer_cache": False}})
            times["fresh (worker)"].append(elapsed)
            ask_ms(server, request)  # stores the answer (the same request as the fresh one)
            for _ in range(HIT_POLLS):
                elapsed, stored = ask_ms(server, request)
                if stored is not None and stored["usage"]["reame"].get("answer_cache") == "hit":
                    break
            else:
                raise RuntimeError(f"request {i} never became a hit")
            if body is None or stored["choices"] != body["choices"]:
                raise RuntimeError("a hit changed the text")
            times["hit (JSON)"].append(elapsed)
            times["hit (streamed)"].append(ask_ms(server, {**request, "stream": True})[0])
            progress.step("answers")
    finally:
        progress.close()
        server.stop()
    rows: list[list[Cell]] = [[label, median(values), min(values), max(values)] for label, values in times.items()]
    fresh, hit = median(times["fresh (worker)"]), median(times["hit (JSON)"])
    goal = [f"speed-up at the median: {fresh / hit:.0f}x; "
            f"goal: hit median <= {GOAL_MS:.0f} ms: {'met' if hit <= GOAL_MS else 'NOT met'}"]
    runs = f"{requests} questions about one document, max_tokens {MAX_TOKENS}, greedy, 1 worker, answer cache on"
    return Section("Answer cache: fresh against a hit", goal, how(setup, runs),
                   [table(["request", "median ms", "min ms", "max ms"], rows, digits=1)])
