"""Scenario `back-to-back`: a new document's second question, sent as soon as the first is answered (issue #11).

What a script looping over questions does. reame runs max(2, --threads) workers of one
thread each (its default shape), so the second question finds an idle worker that has
not read the document; prefix affinity should send it to the one that has. Each
document (fresh nonce: nothing is cached; --rounds documents, default 3) is asked a
first question on a settled server (cold), then a second at once. Goal: the second's
TTFT at most 5 % of the first's (median over the documents). The worker log says how
many second questions restored the document from the store instead: those went to the
other worker. reame alone: the peer is one process, it has nothing to route.
"""

from __future__ import annotations

from collections.abc import Sequence

from reame.benchmarks.common import Progress, Setup, Timing, ask, chat, how
from reame.benchmarks.first import settle
from reame.benchmarks.qa import QUESTIONS, documents
from reame.benchmarks.report import Cell, Section, median, ratio, table
from reame.benchmarks.server import start_server

MAX_TOKENS = 8
DOCUMENTS = 3
GOAL = 0.05  # the second question's TTFT, of the first's


def workers(setup: Setup) -> int:
    """One worker per thread, and at least two: with one there is no other worker to send the second question to."""
    return max(2, setup.threads)


def run(setup: Setup) -> Section:
    docs = documents(setup, 1 if setup.quick else setup.rounds or DOCUMENTS)
    progress = Progress(2 * len(docs), "back-to-back")
    pairs: list[tuple[Timing, Timing]] = []
    server = start_server(setup.tmp / "back-to-back", workers(setup), **setup.overrides(workers_threads="1"))
    try:
        client = server.client(timeout=900)
        for doc in docs:
            settle(server)  # the cold read has the cores to itself, as a new document's first question would
            first = ask(client, chat(doc, QUESTIONS[0]), MAX_TOKENS)
            progress.step("cold")
            pairs.append((first, ask(client, chat(doc, QUESTIONS[1]), MAX_TOKENS)))
            progress.step("back to back")
    finally:
        progress.close()
        server.stop()
    return report(setup, pairs, len(server.restores()))


def report(setup: Setup, pairs: Sequence[tuple[Timing, Timing]], restored: int) -> Section:
    rows: list[list[Cell]] = [[i + 1, cold.prompt_tokens, cold.ttft_s, second.ttft_s,
                               ratio(second.ttft_s, cold.ttft_s), second.cached_tokens]
                              for i, (cold, second) in enumerate(pairs)]
    header = ["document", "prompt tokens", "cold TTFT s", "second TTFT s", "second / cold", "second cached tokens"]
    share = median([ratio(second.ttft_s, cold.ttft_s) for cold, second in pairs])
    goal = [f"second question sent as soon as the first is answered: TTFT {share:.3f} of the cold read's "
            f"(median; goal <= {GOAL}: {'met' if share <= GOAL else 'NOT met'})"]
    # No first question restores anything (fresh nonces): every restore is a second question on the other worker.
    notes = [f"second questions that restored the document from the store (another worker took them): "
             f"{restored} of {len(pairs)}"]
    runs = (f"{len(pairs)} document(s) behind fresh nonces, a first question on a settled server then a second at "
            f"once, {MAX_TOKENS} tokens each, greedy, streamed; reame {workers(setup)} workers x 1 thread")
    return Section("Back-to-back questions about a new document", goal, how(setup, runs), [table(header, rows)],
                   notes=notes)
