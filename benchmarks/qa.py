"""Scenario `qa`: questions about the same documents, cold, warm and after a restart of each server.

Each document (about 2,000 tokens; a few hundred with --quick) is asked its first question
(cold), a second at once (back to back), then the rest interleaved between the
documents; then both servers are restarted and each document is asked once more.
Every question goes to reame (one worker of --threads threads, a fresh store) and to
the peer (`python -m llama_cpp.server --cache true`, same threads), alternating which
goes first. Goal: warm and after-restart TTFT at most 5 % of cold.
"""

from __future__ import annotations

from typing import Any

from reame.benchmarks.common import Peer, Progress, Setup, Timing, ask, both, chat, how, nonce
from reame.benchmarks.report import Section, median, plot, ratio, table

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
    progress = Progress(2 * (len(steps) + len(after)), "qa")
    peer = Peer(setup.model, setup.threads, setup.n_ctx, setup.tmp / "qa-peer.log")
    ours: list[Timing] = []
    theirs: list[Timing] = []
    labels: list[str] = []
    try:
        for phase in (steps, after):
            with both(setup, "qa", 1, peer, workers_threads=str(setup.threads)) as (reame, _):
                clients = {"reame": reame.client(timeout=900), "peer": peer.client()}
                for d, q, label in phase:
                    messages = chat(docs[d], QUESTIONS[q % len(QUESTIONS)])
                    pair: dict[str, Timing] = {}
                    sides = ["reame", "peer"] if len(labels) % 2 == 0 else ["peer", "reame"]
                    for side in sides:
                        pair[side] = ask(clients[side], messages, MAX_TOKENS)
                        progress.step(f"{side} {label}")
                    ours.append(pair["reame"])
                    theirs.append(pair["peer"])
                    labels.append(f"doc {d + 1} q{q + 1} {label}")
    finally:
        progress.close()
    return report(setup, labels, ours, theirs, len(docs))


def report(setup: Setup, labels: list[str], ours: list[Timing], theirs: list[Timing], docs: int) -> Section:
    cold_ours = {label.split(" q")[0]: t.ttft_s for label, t in zip(labels, ours, strict=True) if "cold" in label}
    cold_theirs = {label.split(" q")[0]: t.ttft_s for label, t in zip(labels, theirs, strict=True) if "cold" in label}
    rows = []
    share: dict[str, dict[str, list[float]]] = {"reame": {}, "peer": {}}
    for label, a, b in zip(labels, ours, theirs, strict=True):
        doc = label.split(" q")[0]
        kind = label.split(" ", 3)[-1]
        of_a, of_b = ratio(a.ttft_s, cold_ours[doc]), ratio(b.ttft_s, cold_theirs[doc])
        if kind != "cold":
            share["reame"].setdefault(kind, []).append(of_a)
            share["peer"].setdefault(kind, []).append(of_b)
        rows.append([label, a.prompt_tokens, a.ttft_s, of_a, a.total_s, a.cached_tokens, b.ttft_s, of_b, b.total_s])
    header = ["request", "reame prompt tokens", "reame TTFT s", "of cold", "reame total s", "reame cached tokens",
              "peer TTFT s", "of cold", "peer total s"]
    goal = []
    for kind in ("back to back", "interleaved", "after restart"):
        if kind in share["reame"]:
            mine, peers = median(share["reame"][kind]), median(share["peer"][kind])
            goal.append(f"{kind}: TTFT {mine:.3f} of cold for reame, {peers:.3f} for the peer "
                        f"(goal for reame <= 0.05: {'met' if mine <= 0.05 else 'NOT met'})")
    restart = [(a.ttft_s, b.ttft_s) for label, a, b in zip(labels, ours, theirs, strict=True) if "restart" in label]
    after = ratio(median([r[0] for r in restart]), median([r[1] for r in restart]))
    goal.append(f"after restart, reame's TTFT is {after:.3f} of the peer's")
    warm = [i for i, label in enumerate(labels) if "cold" not in label and "restart" not in label]
    if warm:
        goal.append(f"warm total per request: reame {median([ours[i].total_s for i in warm]):.3f} s, "
                    f"peer {median([theirs[i].total_s for i in warm]):.3f} s")

    def draw(axes: Any) -> None:
        xs = list(range(1, len(labels) + 1))
        axes.plot(xs, [t.ttft_s for t in ours], "o-", label="reame")
        axes.plot(xs, [t.ttft_s for t in theirs], "s-", label="llama_cpp.server --cache true")
        axes.set_yscale("log")
        axes.set_xticks(xs, labels, rotation=30, ha="right", fontsize=7)
        axes.set_ylabel("time to first token (s, log)")
        axes.set_title("TTFT per question")

    plots = [name for name in [plot(setup.out, "qa_ttft.png", draw)] if name]
    runs = (f"{docs} document(s), {len(labels)} requests per server, {MAX_TOKENS} tokens each, streamed with the "
            "openai client, alternating the servers; reame 1 worker, fresh store; peer `--cache true`")
    return Section("Repeated-document QA", goal, how(setup, runs), [table(header, rows)], plots)

