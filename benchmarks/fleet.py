"""Scenario `fleet`: a document read on host A, then asked about on host B, which shares only the Redis tier.

Issue #32's goal: B's TTFT against a cold read, <= 0.1, with the transfer time from the
shared tier reported. Two reame servers with their own cache directories, run
directories and ports stand for two hosts; the only thing they share is a redis-server
on 127.0.0.1 TCP (a fleet's would be on the private network). A reads the document and
pushes its state; then B, started after A has stopped (so A's memory cannot help), reads
the document under another nonce, cold with ``"cache": false`` (the baseline, on B's own
cores: the same tokens but for the nonce, which B's worker then holds in memory and which
shares no prefix with A's), and then a new question about A's document: B's cachekeeper
misses locally, fetches the entry from Redis into its store, and the worker restores it.
B's tier counters give the bytes and the seconds of the transfer. reame alone: no peer
shares a KV cache between hosts.
"""

from __future__ import annotations

import time
from typing import Any, Final

from reame.benchmarks.common import Progress, Setup, Timing, ask, chat, how, nonce
from reame.benchmarks.exam import load_exam
from reame.benchmarks.redis_server import running_redis
from reame.benchmarks.report import Cell, Section, ratio, table
from reame.benchmarks.server import Server, free_port, start_server

MAX_TOKENS: Final = 16
GOAL: Final = 0.1  # B's TTFT, restoring from the shared tier, of a cold read on B
PUSH_TIMEOUT_S: Final = 600.0
QUESTIONS: Final = ("What is the most important price mentioned?", "Who should be contacted with questions?",
                    "What happens if a rule is broken?")
COLD: Final[dict[str, Any]] = {"extra_body": {"reame": {"cache": False}}}
MB: Final = 1e6


def run(setup: Setup) -> Section:
    docs, _ = load_exam(setup.exam, setup.quick)
    body = next(iter(docs.values()))
    document = nonce() + body  # new to every store and to Redis
    progress = Progress(3, "fleet")
    with running_redis(port=free_port(), maxmemory="1gb") as redis:
        if not redis.answers():
            raise RuntimeError("redis-server listens but does not answer PING")
        tier = setup.overrides(workers_threads=str(setup.threads), cache_shared_url=redis.url,
                               cache_shared_prefix="bench:", cache_shared_timeout="5", cache_timeout="60")
        try:
            host_a = start_server(setup.tmp / "fleet-a", 1, **tier)
            try:
                read_a = ask(host_a.client(timeout=900), chat(document, QUESTIONS[0]), MAX_TOKENS)
                progress.step("A reads")
                pushed = wait_pushed(host_a)
            finally:
                host_a.stop()
            memory = redis.used_memory()
            host_b = start_server(setup.tmp / "fleet-b", 1, **tier)
            try:
                client = host_b.client(timeout=900)
                cold_b = ask(client, chat(nonce() + body, QUESTIONS[1]), MAX_TOKENS, **COLD)
                progress.step("B cold")
                from_tier = ask(client, chat(document, QUESTIONS[2]), MAX_TOKENS)
                progress.step("B from the tier")
                shared = host_b.cache_stats()["shared"]
                restores = host_b.restores()
            finally:
                host_b.stop()
        finally:
            progress.close()
    return report(setup, read_a, cold_b, from_tier, pushed, shared, memory, restores)


def wait_pushed(server: Server) -> dict[str, Any]:
    """Wait until the server's cachekeeper has pushed an entry to the tier; return its tier counters."""
    deadline = time.monotonic() + PUSH_TIMEOUT_S
    while time.monotonic() < deadline:
        shared: dict[str, Any] = server.cache_stats()["shared"]
        if shared["pushes"] >= 1:
            return shared
        time.sleep(0.5)
    raise RuntimeError(f"host A pushed nothing to the shared tier in {PUSH_TIMEOUT_S:.0f} s")


def report(setup: Setup, read_a: Timing, cold_b: Timing, from_tier: Timing, pushed: dict[str, Any],
           shared: dict[str, Any], memory: int, restores: list[str]) -> Section:
    share = ratio(from_tier.ttft_s, cold_b.ttft_s)
    verdict = "met" if share <= GOAL else "NOT met"
    rows: list[list[Cell]] = [
        ["A: first read (stores, pushes to Redis)", read_a.ttft_s, read_a.cached_tokens, read_a.prompt_tokens],
        ['B: the document cold, another nonce ("cache": false)', cold_b.ttft_s, cold_b.cached_tokens,
         cold_b.prompt_tokens],
        ["B: a new question, the document from the tier", from_tier.ttft_s, from_tier.cached_tokens,
         from_tier.prompt_tokens],
    ]
    goal = [f"on host B: TTFT {share:.3f} of a cold read on B (goal <= {GOAL}: {verdict})",
            f"transfer from the shared tier: {shared['bytes_fetched'] / MB:.1f} MB in {shared['fetch_seconds']:.3f} s "
            f"(index lookup and fetch; {shared['hits']} hit), then restored by the worker",
            f"Redis memory after A's push: {memory / MB:.1f} MB for one document of {read_a.prompt_tokens} tokens "
            f"({pushed['bytes_pushed'] / MB:.1f} MB pushed)"]
    runs = (f"two reame servers (1 worker, {setup.threads} threads) with their own stores, sharing only a "
            f"redis-server on 127.0.0.1 TCP; A stopped before B started; {MAX_TOKENS} tokens, greedy, streamed")
    notes = [f"B's restore (worker log): `{line}`" for line in restores]
    return Section("A document read on one host, asked about on another (the shared tier)", goal, how(setup, runs),
                   [table(["request", "TTFT s", "cached tokens", "prompt tokens"], rows)], notes=notes)
