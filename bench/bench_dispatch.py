"""Read each document once: back-to-back questions, and many clients over a few documents.

Two scenarios on the default configuration (2 workers x 1 thread unless told):

- back to back: a new document is asked one question, then a second one as soon
  as the first is answered (what a script looping over questions does); the
  second's time to first token as a share of the first's (goal: <= 0.05);
- lone: a cold question with nothing else running, on 2 workers x 1 thread (the
  idle worker lends its thread) and on 1 worker x 2 threads, alternated (goal:
  within 10 %);
- load: 8 clients ask 24 questions over 4 documents, interleaved, first of reame
  then of ``python -m llama_cpp.server --cache true`` (one process of all the
  threads) on the same model; requests/s, p50 and p95 latency, and how many
  requests read their document in full (goal: as many as there are documents).

    .venv/bin/python -m bench.bench_dispatch [--model PATH] [--workers 2] [--skip-peer]

A benchmark, not a test: it prints figures and ratios.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import openai

from bench.bench_cache import Peer, Timing, ask
from reame.benchmarks.server import Server, start_server
from reame.shared.config import load
from reame.shared.model_file import model_path

DOCS = Path(__file__).resolve().parents[2] / "shared" / "eval" / "docs"
QUESTIONS = [
    "Summarise the first rule in one sentence.",
    "What is the most important price mentioned?",
    "Who should be contacted with questions?",
    "What happens if a rule is broken?",
    "What is said about opening hours?",
    "Name one condition mentioned in the text.",
]
CLIENTS = 8


def documents(count: int) -> list[str]:
    """Return ``count`` eval documents, each behind a fresh nonce so that nothing is warm."""
    files = sorted(DOCS.glob("*.txt"))[:count]
    return [f"Reference {uuid.uuid4().hex[:8]}.\n\n" + file.read_text(encoding="utf-8") for file in files]


def back_to_back(client: openai.OpenAI, docs: list[str]) -> None:
    print("back to back (the second question sent as soon as the first is answered):")
    print(f"{'document':>9}{'cold TTFT':>11}{'next TTFT':>11}{'ratio':>8}{'cached':>8}")
    ratios = []
    for i, doc in enumerate(docs):
        cold = ask(client, doc, QUESTIONS[0])
        warm = ask(client, doc, QUESTIONS[1])
        ratios.append(warm.ttft_s / cold.ttft_s)
        print(f"{i:9}{cold.ttft_s:11.3f}{warm.ttft_s:11.3f}{ratios[-1]:8.3f}{warm.cached_tokens!s:>8}")
    print(f"median ratio: {statistics.median(ratios):.3f} (goal <= 0.05)")


def lone(server: Server, single: Server, rounds: int) -> None:
    print("\nlone cold request: 2 workers x 1 thread (lending) against 1 worker x 2 threads, alternated:")
    pairs = []
    for _ in range(rounds):
        ours = ask(server.client(timeout=600), documents(1)[0], QUESTIONS[0]).ttft_s
        theirs = ask(single.client(timeout=600), documents(1)[0], QUESTIONS[0]).ttft_s
        pairs.append(ours / theirs)
        print(f"  {ours:8.3f} s  vs  {theirs:8.3f} s   ratio {pairs[-1]:.3f}")
    print(f"median ratio: {statistics.median(pairs):.3f} (goal <= 1.10)")


def load_run(client: openai.OpenAI, docs: list[str], per_doc: int) -> tuple[float, list[Timing]]:
    """Ask ``per_doc`` questions about each document from CLIENTS threads, interleaved; return wall time, timings."""
    jobs = [(doc, QUESTIONS[q]) for q in range(per_doc) for doc in docs]
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        timings = list(pool.map(lambda job: ask(client, *job), jobs))
    return time.perf_counter() - started, timings


def summary(name: str, wall: float, timings: list[Timing]) -> tuple[float, float]:
    totals = sorted(t.total_s for t in timings)
    p95 = totals[min(len(totals) - 1, round(0.95 * (len(totals) - 1)))]
    # A chat template's opening tokens may be reused from any earlier prompt.
    full = sum(1 for t in timings if t.cached_tokens is not None and t.cached_tokens < 50)
    print(f"{name:8}{len(timings) / wall:10.3f}{statistics.median(totals):9.2f}{p95:9.2f}"
          f"{full if timings[0].cached_tokens is not None else '-':>15}")
    return len(timings) / wall, p95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF path (default: the embedded SmolLM2-135M)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="threads per reame worker")
    parser.add_argument("--documents", type=int, default=4)
    parser.add_argument("--per-doc", type=int, default=6)
    parser.add_argument("--skip-peer", action="store_true")
    args = parser.parse_args()

    environ = {"REAME_MODEL_PATH": args.model} if args.model else {}
    config = load(None, environ=environ)
    path = str(model_path(config))
    overrides = {"workers_threads": str(args.threads), **({"model_path": args.model} if args.model else {})}
    print(f"model: {Path(path).name}, reame: {args.workers} workers x {args.threads} thread(s)")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        server = start_server(tmp / "reame", workers=args.workers, **overrides)
        try:
            back_to_back(server.client(timeout=600), documents(3))
            single = start_server(tmp / "single", workers=1, **{**overrides, "workers_threads": str(args.workers)})
            try:
                lone(server, single, 3)
            finally:
                single.stop()
            print(f"\nload: {CLIENTS} clients, {args.documents} documents x {args.per_doc} questions")
            print(f"{'server':8}{'req/s':>10}{'p50 s':>9}{'p95 s':>9}{'full prefills':>15}")
            ours = summary("reame", *load_run(server.client(timeout=900), documents(args.documents), args.per_doc))
        finally:
            server.stop()
        if args.skip_peer:
            return
        peer = Peer(path, args.workers * args.threads, config.model.n_ctx, tmp / "peer.log")
        peer.start()
        try:
            theirs = summary("peer", *load_run(peer.client(), documents(args.documents), args.per_doc))
        finally:
            peer.stop()
    print(f"reame/peer throughput: {ours[0] / theirs[0]:.2f}x (goal >= 3), "
          f"p95: {ours[1] / theirs[1]:.2f} of the peer's (goal <= 0.33)")


if __name__ == "__main__":
    main()
