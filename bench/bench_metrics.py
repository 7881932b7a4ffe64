"""How long a /metrics scrape takes while streams run (issue #13: goal under 100 ms with 8 streams).

Starts `reame serve` with two gunicorn processes, scrapes an idle server, then keeps
STREAMS streaming chat completions running and scrapes again and again, so each
scrape also asks the dispatcher and the cachekeeper for their figures.

    .venv/bin/python -m bench.bench_metrics [--workers 2] [--streams 8] [--scrapes 40]

A benchmark, not a test: it prints figures.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import tempfile
import threading
import time
from pathlib import Path

from reame.benchmarks.server import Server, start_server


def scrape_ms(server: Server) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        begin = time.perf_counter()
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        response.read()
        elapsed = (time.perf_counter() - begin) * 1000
    finally:
        connection.close()
    assert response.status == 200
    return elapsed


def summary(label: str, values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (f"{label}: {len(values)} scrapes, median {statistics.median(values):.1f} ms, "
            f"p90 {p90:.1f} ms, max {ordered[-1]:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--scrapes", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), workers=args.workers, server_gateway_processes="2")
        try:
            idle = [scrape_ms(server) for _ in range(args.scrapes)]
            stop = threading.Event()
            running = threading.Semaphore(0)

            def stream(index: int) -> None:
                client = server.client()
                while not stop.is_set():
                    chunks = client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": f"Tell story number {index}."}],
                        max_tokens=64, stream=True,
                    )
                    running.release()
                    for _ in chunks:
                        pass

            threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(args.streams)]
            for thread in threads:
                thread.start()
            for _ in threads:
                running.acquire()  # every stream has had its 200
            busy = []
            for _ in range(args.scrapes):
                busy.append(scrape_ms(server))
                time.sleep(0.05)
            stop.set()
            for thread in threads:
                thread.join()
        finally:
            server.stop()
    print(summary("idle", idle))
    print(summary(f"{args.streams} streams running", busy))


if __name__ == "__main__":
    main()
