"""Time to first token after a restart, and where it goes.

One worker (``--threads`` threads) reads a document of about 2,000 tokens (cold), answers
a second question about it (warm), is stopped and started again on the same store, and
answers two more (after the restart, then warm again). The worker log's ``restored ...``
line splits the restore into the cachekeeper's answer, the transfer, the check and
decompression, and llama.cpp's load; it is printed below the figures.

    .venv/bin/python -m bench.bench_restart [--model PATH] [--threads 1]

A benchmark, not a test: it prints figures and ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path

from bench.bench_cache import ask
from reame.benchmarks.server import start_server

DOCS = Path(__file__).resolve().parents[2] / "shared" / "eval" / "docs"
QUESTIONS = (
    "What is the most important price mentioned?",
    "Who should be contacted with questions?",
    "What happens if a rule is broken?",
    "What is said about opening hours?",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF path (default: the configured model)")
    parser.add_argument("--threads", default="1", help="threads of the one worker")
    args = parser.parse_args()
    overrides = {"workers_threads": args.threads, **({"model_path": args.model} if args.model else {})}
    document = f"Reference {uuid.uuid4().hex[:8]}.\n\n" + sorted(DOCS.glob("*.txt"))[0].read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        server = start_server(tmp, workers=1, **overrides)
        try:
            cold, warm = (ask(server.client(timeout=900), document, q) for q in QUESTIONS[:2])
        finally:
            server.stop()
        server = start_server(tmp, workers=1, **overrides)  # same run dir and store: a restart
        try:
            after, again = (ask(server.client(timeout=900), document, q) for q in QUESTIONS[2:])
        finally:
            server.stop()
        restores = [line for line in (tmp / "serve.log").read_text().splitlines() if "restored" in line]
    print(f"{'':14}{'TTFT s':>9}{'of cold':>9}{'cached':>8}")
    for name, timing in (("cold", cold), ("warm", warm), ("after restart", after), ("then", again)):
        print(f"{name:14}{timing.ttft_s:9.3f}{timing.ttft_s / cold.ttft_s:9.3f}{timing.cached_tokens!s:>8}")
    print(f"after restart: {after.ttft_s / cold.ttft_s:.3f} of cold (goal <= 0.05)")
    for line in restores:
        print(line.split("reame.worker.prefix_cache: ")[-1])


if __name__ == "__main__":
    main()
