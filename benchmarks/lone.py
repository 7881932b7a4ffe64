"""Scenario `lone`: a cold question alone, on N workers of one thread against one worker of N threads (issue #11).

reame's default shape is a worker per core of one thread each, which serves many
clients well; a request that comes alone would use one core of N, but idle workers
lend it their threads (workers.lend_threads). Two reame servers run side by side,
N = max(2, --threads): N workers x 1 thread (lending) and 1 worker x N threads. Each
round (--rounds, default 3) asks both the same question about a new document (fresh
nonces: both read it cold), alternating which goes first, each with nothing else
running on either server. Goal: the lending server's TTFT within 10 % of the single
worker's (median ratio <= 1.10). reame alone: the peer has no workers.
"""

from __future__ import annotations

from collections.abc import Sequence

from reame.benchmarks.common import Progress, Setup, Timing, ask, chat, how
from reame.benchmarks.first import settle
from reame.benchmarks.qa import QUESTIONS, documents
from reame.benchmarks.report import Cell, Section, median, ratio, table
from reame.benchmarks.server import Server, start_server

MAX_TOKENS = 8
ROUNDS = 3
GOAL = 1.10  # the lending server's TTFT, of the single worker's
SIDES = ("lending", "single")


def threads(setup: Setup) -> int:
    """Threads of each server: at least two, or there is nothing to lend."""
    return max(2, setup.threads)


def run(setup: Setup) -> Section:
    n = threads(setup)
    rounds = 1 if setup.quick else setup.rounds or ROUNDS
    progress = Progress(len(SIDES) * rounds, "lone")
    servers: dict[str, Server] = {}
    timings: dict[str, list[Timing]] = {side: [] for side in SIDES}
    try:
        servers["lending"] = start_server(setup.tmp / "lone-lending", n, **setup.overrides(workers_threads="1"))
        servers["single"] = start_server(setup.tmp / "lone-single", 1, **setup.overrides(workers_threads=str(n)))
        clients = {side: server.client(timeout=900) for side, server in servers.items()}
        for r in range(rounds):
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                for server in servers.values():
                    settle(server)  # alone: neither server runs anything (the other's last read included)
                # The same text behind a new nonce: the same cold read on both sides, of nothing either has seen.
                timings[side].append(ask(clients[side], chat(documents(setup, 1)[0], QUESTIONS[0]), MAX_TOKENS))
                progress.step(side)
    finally:
        progress.close()
        for server in servers.values():
            server.stop()
    return report(setup, timings["lending"], timings["single"])


def report(setup: Setup, lending: Sequence[Timing], single: Sequence[Timing]) -> Section:
    n = threads(setup)
    rows: list[list[Cell]] = [[i + 1, a.prompt_tokens, a.ttft_s, b.ttft_s, ratio(a.ttft_s, b.ttft_s)]
                              for i, (a, b) in enumerate(zip(lending, single, strict=True))]
    header = ["round", "prompt tokens", f"{n} workers x 1 thread TTFT s", f"1 worker x {n} threads TTFT s",
              "lending / single"]
    share = median([ratio(a.ttft_s, b.ttft_s) for a, b in zip(lending, single, strict=True)])
    goal = [f"a lone cold request on {n} workers x 1 thread (idle workers lending their threads): TTFT {share:.3f} "
            f"of 1 worker x {n} threads' (median; goal <= {GOAL:.2f}: {'met' if share <= GOAL else 'NOT met'})"]
    runs = (f"{len(rows)} round(s), each a new document (fresh nonce) asked once of each server, alternating which "
            f"goes first, both idle before each request, {MAX_TOKENS} tokens, greedy, streamed; the two servers run "
            "side by side")
    return Section("A lone cold request: lent threads against one worker of all of them", goal, how(setup, runs),
                   [table(header, rows)])
