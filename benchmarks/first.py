"""Scenario `first`: the first question about a new document, in the default mode against a plain cold read.

Issue #27's goal: in ``auto`` (the default) a first question is answered from
``query``'s excerpts while the document is read in the background, so it should take
at most half the time of the same prompt read cold with compression off. Each
document (fresh nonce, so nothing is cached) is asked its first question twice on one
server: once in the default mode, once with ``"reame": {"compress": "off", "cache":
false}`` (a plain cold read of the same text), alternating which goes first, with the
background warm of the first one allowed to finish in between (it would otherwise
share the cores with the cold read). Answers are graded against the exam when the
documents come from it.
"""

from __future__ import annotations

import time
from typing import Any

from reame.benchmarks.common import Progress, Setup, Timing, ask, chat, how, nonce
from reame.benchmarks.exam import INSTRUCTION, grade, load_exam
from reame.benchmarks.report import Section, median, plot, ratio, table
from reame.benchmarks.server import Server, start_server

MAX_TOKENS = 32
SIDES = ("auto", "cold off")
PLAIN: dict[str, Any] = {"extra_body": {"reame": {"compress": "off", "cache": False}}}
SETTLE_TIMEOUT_S = 600.0
WARM_UP = "".join(f"Line {i}: the warm-up text of the bench, not a document of the exam.\n" for i in range(60))


def run(setup: Setup) -> Section:
    docs, questions = load_exam(setup.exam, setup.quick)
    firsts = [next(q for q in questions if q.doc == name) for name in docs]
    progress = Progress(len(SIDES) * len(firsts), "first")
    timings: dict[str, list[Timing]] = {side: [] for side in SIDES}
    correct = {side: 0 for side in SIDES}
    # auto said outright: the harness starts servers in lossless unless told (benchmarks.server.start_server).
    server = start_server(setup.tmp / "first", 1,
                          **setup.overrides(workers_threads=str(setup.threads), compress_mode="auto"))
    try:
        client = server.client(timeout=900)
        # A server's first compressed request loads the gateway's tokenizer: not a document's cost.
        ask(client, chat(WARM_UP, "Hello."), 1)
        settle(server)
        for i, question in enumerate(firsts):
            order = SIDES if i % 2 == 0 else SIDES[::-1]
            for side in order:
                # A fresh nonce each: neither side finds what the other read, in memory or the store.
                messages = chat(nonce() + docs[question.doc], f"{question.question} {INSTRUCTION}")
                timing = ask(client, messages, MAX_TOKENS, **({} if side == "auto" else PLAIN))
                timings[side].append(timing)
                correct[side] += grade(question, timing.text) == "OK"
                progress.step(side)
                settle(server)
    finally:
        progress.close()
        server.stop()
    return report(setup, [q.id for q in firsts], timings, correct)


def settle(server: Server) -> None:
    """Wait until no background warm is queued or running, so the next request has the cores to itself."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        ready = server.ready() or {}
        prefills = ready.get("prefills", {})
        ended = prefills.get("warms_finished", 0) + prefills.get("warms_preempted", 0)
        if ready.get("running", 1) == 0 and prefills.get("warms_started", 0) <= ended:
            return
        time.sleep(0.2)


def report(setup: Setup, ids: list[str], timings: dict[str, list[Timing]], correct: dict[str, int]) -> Section:
    auto, off = timings["auto"], timings["cold off"]
    rows = [[qid, a.prompt_tokens, a.ttft_s, b.prompt_tokens, b.ttft_s, ratio(a.ttft_s, b.ttft_s)]
            for qid, a, b in zip(ids, auto, off, strict=True)]
    header = ["question", "auto prompt tokens", "auto TTFT s", "off prompt tokens", "off TTFT s", "auto / off"]
    share = median([ratio(a.ttft_s, b.ttft_s) for a, b in zip(auto, off, strict=True)])
    goal = [
        f"first question in auto: TTFT {share:.3f} of the same prompt read cold with compression off "
        f"(median; goal <= 0.5: {'met' if share <= 0.5 else 'NOT met'})",
        f"correct first answers: auto {correct['auto']} of {len(ids)}, off {correct['cold off']} of {len(ids)}",
    ]

    def draw(axes: Any) -> None:
        xs = list(range(1, len(ids) + 1))
        axes.plot(xs, [t.ttft_s for t in auto], "o-", label="auto (default)")
        axes.plot(xs, [t.ttft_s for t in off], "s-", label="compress off, no cache")
        axes.set_xticks(xs, ids, rotation=30, ha="right", fontsize=7)
        axes.set_ylabel("time to first token (s)")
        axes.set_title("First question about a new document")

    plots = [name for name in [plot(setup.out, "first_ttft.png", draw)] if name]
    runs = (f"{len(ids)} document(s), each document's first exam question asked twice on one server (1 worker), "
            f"in auto and with compression and cache off, alternating the order, {MAX_TOKENS} tokens, greedy, "
            "streamed; background warms finish between requests")
    return Section("First question about a new document", goal, how(setup, runs), [table(header, rows)], plots)
