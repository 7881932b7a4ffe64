"""A repeated greedy request through the gateway: fresh (worker) against an answer cache hit (issue #19).

Starts `reame serve` with the answer cache on, then for each of N distinct questions
about one document asks once with ``"reame": {"answer_cache": false}`` (a fresh
generation; the document's KV state is reused after the first, as in production) and
once more after its answer is stored (a hit). Goal: a hit answers in at most 20 ms
at the median, streamed or not.

    .venv/bin/python -m bench.bench_answers [--requests 15] [--max-tokens 48] [--workers 1]

A benchmark, not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from reame.benchmarks.server import Server, start_server

DOCUMENT = " ".join(
    f"Section {i}. The Harbour Street office opens at 8:30 and closes at 17:45 on weekdays; "
    f"a bike costs {10 + i} euros per day, helmets are free and locks cost 2 euros per day."
    for i in range(12)
)


def ask_ms(server: Server, payload: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """Send one request and read the whole answer; return the milliseconds and the JSON body (None if streamed)."""
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
    assert response.status == 200, raw
    return elapsed, None if payload.get("stream") else json.loads(raw)


def summary(label: str, values: list[float]) -> str:
    return (f"{label:<24} median {statistics.median(values):8.1f} ms   "
            f"min {min(values):8.1f} ms   max {max(values):8.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=15)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), workers=args.workers, cache_answers="true")
        try:
            fresh, hit, hit_stream = [], [], []
            for i in range(args.requests):
                payload = {
                    "model": "m", "temperature": 0, "max_tokens": args.max_tokens,
                    "messages": [{"role": "system", "content": DOCUMENT},
                                 {"role": "user", "content": f"Question {i}: what does a bike cost in section {i}?"}],
                }
                elapsed, body = ask_ms(server, {**payload, "reame": {"answer_cache": False}})
                fresh.append(elapsed)
                ask_ms(server, payload)  # stores the answer (the same request as the fresh one)
                for _ in range(50):  # it is stored just after that reply: at most a moment later
                    elapsed, stored = ask_ms(server, payload)
                    if stored is not None and stored["usage"]["reame"].get("answer_cache") == "hit":
                        break
                else:
                    raise SystemExit(f"request {i} never became a hit")
                assert body is not None and stored["choices"] == body["choices"], "a hit changed the text"
                hit.append(elapsed)
                hit_stream.append(ask_ms(server, {**payload, "stream": True})[0])
            print(f"{args.requests} questions, max_tokens {args.max_tokens}, {args.workers} worker(s)")
            print(summary("fresh (worker)", fresh))
            print(summary("hit (JSON)", hit))
            print(summary("hit (streamed)", hit_stream))
            print(f"speed-up at the median: {statistics.median(fresh) / statistics.median(hit):.0f}x; "
                  f"goal: hit median <= 20 ms: {'met' if statistics.median(hit) <= 20 else 'NOT met'}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
