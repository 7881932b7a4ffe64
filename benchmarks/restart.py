"""Scenario `restart`: time to first token after a restart of reame, and where it goes.

One worker (``--threads`` threads) reads an exam document (cold), answers a second
question about it (warm), is stopped and started again on the same store, and answers
two more (after the restart, then warm again). The worker log's ``restored ...`` lines
split the restore into the cachekeeper's answer, the transfer, the check and
decompression, and llama.cpp's load; the report quotes them. reame alone: `qa` has the
same restart against the peer, this one says where reame's restore time goes.
"""

from __future__ import annotations

from reame.benchmarks.common import Progress, Setup, Timing, ask, chat, how, nonce
from reame.benchmarks.exam import load_exam
from reame.benchmarks.report import Cell, Section, ratio, table
from reame.benchmarks.server import start_server

MAX_TOKENS = 16
GOAL = 0.05  # after a restart, TTFT of the cold read's
QUESTIONS = (
    "What is the most important price mentioned?",
    "Who should be contacted with questions?",
    "What happens if a rule is broken?",
    "What is said about opening hours?",
)
LABELS = ("cold", "warm", "after restart", "then")


def run(setup: Setup) -> Section:
    docs, _ = load_exam(setup.exam, setup.quick)
    # A fresh nonce: nothing an earlier run stored is found.
    document = nonce() + next(iter(docs.values()))
    tmp = setup.tmp / "restart"
    overrides = setup.overrides(workers_threads=str(setup.threads))
    progress = Progress(len(QUESTIONS), "restart")
    timings: list[Timing] = []
    try:
        for pair in (QUESTIONS[:2], QUESTIONS[2:]):
            server = start_server(tmp, 1, **overrides)  # the same run dir and store: the second start is a restart
            try:
                client = server.client(timeout=900)
                for question in pair:
                    timings.append(ask(client, chat(document, question), MAX_TOKENS))
                    progress.step("restart")
            finally:
                server.stop()
    finally:
        progress.close()
    restores = server.restores()  # both starts: they share the run dir and its log
    cold = timings[0].ttft_s
    rows: list[list[Cell]] = [[label, t.ttft_s, ratio(t.ttft_s, cold), t.cached_tokens, t.prompt_tokens]
                              for label, t in zip(LABELS, timings, strict=True)]
    after = ratio(timings[2].ttft_s, cold)
    verdict = "met" if after <= GOAL else "NOT met"
    goal = [f"after a restart: TTFT {after:.3f} of the cold read's (goal <= {GOAL}: {verdict})"]
    tables = [table(["request", "TTFT s", "of cold", "cached tokens", "prompt tokens"], rows)]
    runs = f"one exam document, 1 worker, {MAX_TOKENS} tokens, greedy, streamed; stopped and started on the same store"
    notes = [f"where the restore went (worker log): `{line}`" for line in restores]
    return Section("Time to first token after a restart", goal, how(setup, runs), tables, notes=notes)
