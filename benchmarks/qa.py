"""Scenario `qa`: questions about the same documents, cold, warm and after a restart of each server.

Each document (about 2,000 tokens; a few hundred with --quick) is asked its first question
(cold), a second at once (back to back), then the rest interleaved between the
documents; then both servers are restarted and each document is asked once more.
Every question goes to reame (one worker of --threads threads, a fresh store) and to
each peer (benchmarks.peers: llama-server with its RAM prompt cache, llama_cpp.server
`--cache true`; same threads), rotating which goes first. Goal: warm and after-restart
TTFT at most 5 % of cold.
"""

from __future__ import annotations

import contextlib
from typing import Any

from reame.benchmarks import peers
from reame.benchmarks.common import Progress, Setup, Timing, ask, chat, how, nonce
from reame.benchmarks.report import Section, median, plot, ratio, table
from reame.benchmarks.server import start_server

QUESTIONS = (
    "What is the price of the cheapest option?",
    "What happens if a rule is broken?",
    "Is a deposit or advance payment required?",
    "What are the opening hours?",
    "Who should be contacted with questions?",
    "Name one condition mentioned in the text.",
)
MAX_TOKENS = 8
QUICK_CHARS = 2000  # about 450 tokens: above cache.min_tokens (256), so it is stored
FILLER = ("Section {i}. The office on Harbour Street opens at 8:30 and closes at 17:45 on weekdays. A bike costs "
          "{p} euros per day; helmets are free, locks cost 2 euros per day and a deposit of 50 euros is required. "
          "Late returns cost 5 euros per hour. Questions go to the front desk or to help@example.org.\n")


def documents(setup: Setup, count: int, quick_chars: int = QUICK_CHARS) -> list[str]:
    """``count`` documents behind fresh nonces: the exam's when there, else made up; cut short with --quick."""
    files = sorted((setup.exam / "docs").glob("*.txt")) if (setup.exam / "docs").is_dir() else []
    texts = [path.read_text(encoding="utf-8") for path in files[:count]]
    while len(texts) < count:
        texts.append("".join(FILLER.format(i=i, p=10 + i + len(texts)) for i in range(30)))
    if setup.quick:
        texts = [text[:quick_chars] for text in texts]
    return [nonce() + text for text in texts]


def plan(docs: int, questions: int) -> list[tuple[int, int, str]]:
    """(document, question, label) in order: cold and back to back per document, then the rest interleaved."""
    steps = []
    for d in range(docs):
        steps += [(d, 0, "cold"), (d, 1, "back to back")][:questions]
    for q in range(2, questions):
        steps += [(d, q, "interleaved") for d in range(docs)]
    return steps


def run(setup: Setup) -> Section:
    docs = documents(setup, 1 if setup.quick else 2)
    questions = 2 if setup.quick else 5
    steps = plan(len(docs), questions)
    after = [(d, questions, "after restart") for d in range(len(docs))]
    sides = ["reame", *setup.peers]
    progress = Progress(len(sides) * (len(steps) + len(after)), "qa")
    timings: dict[str, list[Timing]] = {side: [] for side in sides}
    labels: list[str] = []
    try:
        for phase in (steps, after):
            with contextlib.ExitStack() as stack:
                reame = start_server(setup.tmp / "qa", 1, **setup.overrides(workers_threads=str(setup.threads)))
                stack.callback(reame.stop)
                clients = {"reame": reame.client(timeout=900)}
                for peer in setup.peers:
                    clients[peer] = stack.enter_context(peers.serving(setup, peer, "qa"))
                for d, q, label in phase:
                    messages = chat(docs[d], QUESTIONS[q % len(QUESTIONS)])
                    shift = len(labels) % len(sides)
                    for side in sides[shift:] + sides[:shift]:
                        timings[side].append(ask(clients[side], messages, MAX_TOKENS))
                        progress.step(f"{side} {label}")
                    labels.append(f"doc {d + 1} q{q + 1} {label}")
    finally:
        progress.close()
    return report(setup, labels, timings, len(docs))


def report(setup: Setup, labels: list[str], timings: dict[str, list[Timing]], docs: int) -> Section:
    def doc(label: str) -> str:
        return label.split(" q")[0]

    def kind(label: str) -> str:
        return label.split(" ", 3)[-1]

    cold = {side: {doc(label): t.ttft_s for label, t in zip(labels, ts, strict=True) if kind(label) == "cold"}
            for side, ts in timings.items()}
    share: dict[str, dict[str, list[float]]] = {side: {} for side in timings}
    rows = []
    for i, label in enumerate(labels):
        ours = timings["reame"][i]
        row: list[Any] = [label, ours.prompt_tokens, ours.ttft_s, ratio(ours.ttft_s, cold["reame"][doc(label)]),
                          ours.total_s, ours.cached_tokens]
        for side, ts in timings.items():
            of_cold = ratio(ts[i].ttft_s, cold[side][doc(label)])
            if kind(label) != "cold":
                share[side].setdefault(kind(label), []).append(of_cold)
            if side != "reame":
                row += [ts[i].ttft_s, of_cold]
        rows.append(row)
    others = [side for side in timings if side != "reame"]
    header = ["request", "reame prompt tokens", "reame TTFT s", "of cold", "reame total s", "reame cached tokens"]
    for side in others:
        header += [f"{side} TTFT s", "of cold"]
    goal = []
    for name in ("back to back", "interleaved", "after restart"):
        if name in share["reame"]:
            mine = median(share["reame"][name])
            theirs = "".join(f", {median(share[side][name]):.3f} for {side}" for side in others)
            goal.append(f"{name}: TTFT {mine:.3f} of cold for reame{theirs} "
                        f"(goal for reame <= 0.05: {'met' if mine <= 0.05 else 'NOT met'})")
    restarted = [i for i, label in enumerate(labels) if kind(label) == "after restart"]
    for side in others:
        after = ratio(median([timings["reame"][i].ttft_s for i in restarted]),
                      median([timings[side][i].ttft_s for i in restarted]))
        goal.append(f"after restart, reame's TTFT is {after:.3f} of {side}'s")
    warm = [i for i, label in enumerate(labels) if kind(label) not in ("cold", "after restart")]
    if warm:
        goal.append("warm total per request: " + ", ".join(
            f"{side} {median([ts[i].total_s for i in warm]):.3f} s" for side, ts in timings.items()))
    goal += peers.missing_lines(setup)

    def draw(axes: Any) -> None:
        xs = list(range(1, len(labels) + 1))
        for side, ts in timings.items():
            axes.plot(xs, [t.ttft_s for t in ts], "o-", label=side)
        axes.set_yscale("log")
        axes.set_xticks(xs, labels, rotation=30, ha="right", fontsize=7)
        axes.set_ylabel("time to first token (s, log)")
        axes.set_title("TTFT per question")

    plots = [name for name in [plot(setup.out, "qa_ttft.png", draw)] if name]
    runs = (f"{docs} document(s), {len(labels)} requests per server, {MAX_TOKENS} tokens each, streamed with the "
            "openai client, rotating which server goes first; reame 1 worker, fresh store")
    extra = "; ".join(peers.describe(side, setup.threads) for side in others)
    return Section("Repeated-document QA", goal, how(setup, runs, extra), [table(header, rows)], plots)
