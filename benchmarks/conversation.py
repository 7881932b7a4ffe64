"""Scenario `conversation`: six turns about one document in the system message, back to back.

What the web page and chat clients send (issue #27): the document as the system
message, a question, the reply appended, the next question sent as soon as the reply
has arrived, six turns. Each side holds the same conversation on its own server, one
after the other: reame in its default layout and mode (one worker per thread, `auto`),
llama.cpp's llama-server (`-np 1 --cache-reuse 256 --cache-ram`, where one is built) and
llama-cpp-python's server (`--cache true`). The questions are the exam's about the
document; each side's own replies are appended, so the prompts differ a little between
sides, and what a turn adds is counted with the model's tokenizer: the previous reply
and the new question.

Goals (issue #27): turns 2-6 each read at most what the turn adds plus 64 tokens
(prompt less cached tokens, from usage), and their median TTFT at most 0.1 of turn 1's.
Then reame alone: a short chat and a one-paragraph document (`chat_checks`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from reame.benchmarks import chat_checks
from reame.benchmarks.common import Progress, Setup, Timing, ask, how, nonce
from reame.benchmarks.exam import INSTRUCTION, Question, grade, load_exam
from reame.benchmarks.peers import PEERS, describe, missing_lines, serving
from reame.benchmarks.report import Section, median, plot, ratio, table
from reame.benchmarks.server import start_server

TURNS = 6
QUICK_TURNS = 3
QUICK_CHARS = 1500
MAX_TOKENS = 32
SLACK_TOKENS = 64  # the chat template's markers around a turn, and a token or two the tokenizer joins differently
TTFT_GOAL = 0.1
PEER_N_CTX = 8192
WARM_UP = [{"role": "user", "content": "Say hello."}]  # a server's first request loads what requests share


def run(setup: Setup) -> Section:
    docs, questions = load_exam(setup.exam, quick=False)  # --quick's one question would be a one-turn chat
    name = next(iter(docs))
    asked = [q for q in questions if q.doc == name][: QUICK_TURNS if setup.quick else TURNS]
    # A fresh nonce: nothing an earlier run stored is found, on any side.
    document = nonce() + (docs[name][:QUICK_CHARS] if setup.quick else docs[name])
    sides: dict[str, Callable[[Progress], list[Timing]]] = {
        "reame (default: auto, one worker a thread)": lambda progress: on_reame(setup, document, asked, progress),
    }
    for peer in setup.peers:
        sides[peer] = functools.partial(on_peer, setup, peer, document, asked)
    progress = Progress(len(sides) * len(asked) + chat_checks.STEPS, "conversation")
    try:
        timings = {side: go(progress) for side, go in sides.items()}
        checks = chat_checks.run(setup, progress)
    finally:
        progress.close()
    added = {side: turn_sizes(setup, asked, ts) for side, ts in timings.items()}
    section = report(setup, name, asked, timings, added)
    section.goal += checks[0]
    section.tables += checks[1]
    return section


def converse(client: Any, document: str, asked: list[Question], progress: Progress, label: str) -> list[Timing]:
    """Hold the conversation: each question sent as soon as the previous reply is in, the reply appended."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": document}]
    timings: list[Timing] = []
    for question in asked:
        messages.append({"role": "user", "content": f"{question.question} {INSTRUCTION}"})
        timing = ask(client, messages, MAX_TOKENS)
        messages.append({"role": "assistant", "content": timing.text})
        timings.append(timing)
        progress.step(label)
    return timings


def on_reame(setup: Setup, document: str, asked: list[Question], progress: Progress) -> list[Timing]:
    server = start_server(setup.tmp / "conversation", setup.threads,
                          **setup.overrides(compress_mode="auto", cache_answers="true"))
    try:
        client = server.client(timeout=900)
        ask(client, WARM_UP, 1)
        return converse(client, document, asked, progress, "reame")
    finally:
        server.stop()


def on_peer(setup: Setup, peer: str, document: str, asked: list[Question], progress: Progress) -> list[Timing]:
    with serving(setup, peer, "conversation", n_ctx=max(setup.n_ctx, PEER_N_CTX)) as client:
        return converse(client, document, asked, progress, peer)


def turn_sizes(setup: Setup, asked: list[Question], timings: list[Timing]) -> list[int]:
    """What each turn after the first adds, in the model's tokens: the last reply and the new question."""
    from reame.gateway.compress.tokenizer import Tokenizer

    tokenizer = Tokenizer(setup.model)
    tokenizer.load()
    return [tokenizer.count(before.text) + tokenizer.count(f"{question.question} {INSTRUCTION}")
            for before, question in zip(timings, asked[1:], strict=False)]


def read(timing: Timing) -> int | None:
    """Prompt tokens the server read (prompt less cached), None when it sends no usage (llama-cpp-python)."""
    return None if timing.prompt_tokens is None else timing.prompt_tokens - (timing.cached_tokens or 0)


def read_within(timings: list[Timing], added: list[int]) -> list[bool]:
    """Whether each turn after the first read at most what it added plus SLACK_TOKENS (False when unknown)."""
    within = []
    for timing, grown in zip(timings[1:], added, strict=True):
        tokens = read(timing)
        within.append(tokens is not None and tokens <= grown + SLACK_TOKENS)
    return within


def report(setup: Setup, name: str, asked: list[Question], timings: dict[str, list[Timing]],
           added: dict[str, list[int]]) -> Section:
    rows: list[list[Any]] = []
    later: dict[str, float] = {}
    goal: list[str] = []
    for side, ts in timings.items():
        later[side] = median([t.ttft_s for t in ts[1:]])
        within = read_within(ts, added[side])
        correct = sum(grade(q, t.text) == "OK" for q, t in zip(asked, ts, strict=True))
        counted = ts[0].prompt_tokens is not None
        rows.append([side, ts[0].ttft_s, ts[0].prompt_tokens, later[side], ratio(later[side], ts[0].ttft_s),
                     f"{sum(within)} of {len(within)}" if counted else "- (no usage)", f"{correct} of {len(ts)}"])
    ours = next(iter(timings))
    share = ratio(later[ours], timings[ours][0].ttft_s)
    within = read_within(timings[ours], added[ours])
    goal.append(f"reame: turns 2-{len(asked)} read at most what the turn added + {SLACK_TOKENS} tokens in "
                f"{sum(within)} of {len(within)} (goal: all: {'met' if all(within) else 'NOT met'})")
    goal.append(f"reame: median TTFT of turns 2-{len(asked)} {share:.3f} of turn 1's (goal <= {TTFT_GOAL}: "
                f"{'met' if share <= TTFT_GOAL else 'NOT met'})")
    for peer in PEERS:
        if peer in later:
            goal.append(f"reame's later median TTFT {ratio(later[ours], later[peer]):.3f} of {peer}'s; turn 1 "
                        f"{ratio(timings[ours][0].ttft_s, timings[peer][0].ttft_s):.3f}")
    goal += missing_lines(setup)
    header = ["side", "turn 1 TTFT s", "turn 1 prompt tokens", "turns 2+ median TTFT s", "of turn 1",
              "turns 2+ read within added + 64", "correct"]
    per_turn = [[side, *[f"{t.ttft_s:.2f} s, read {'?' if read(t) is None else read(t)}"
                         + (f" of +{grown}" if grown else "") + (f" ({t.compression})" if t.compression else "")
                         for t, grown in zip(ts, [0, *added[side]], strict=True)]]
                for side, ts in timings.items()]

    def draw(axes: Any) -> None:
        xs = list(range(1, len(asked) + 1))
        for side, ts in timings.items():
            axes.plot(xs, [t.ttft_s for t in ts], "o-", label=side)
        axes.set_xticks(xs)
        axes.set_xlabel("turn")
        axes.set_ylabel("time to first token (s)")
        axes.set_title("A conversation about one document, turns back to back")

    # A turn 1 answered from query's excerpts leaves the document unread; a turn 2 sent at once
    # reads it itself (resuming the background warm) rather than wait: that turn is named here.
    notes = [f"reame's turn {n} read {read(t)} tokens, {t.compression or 'as sent'}: the document, not yet read when "
             "it came" for n, (t, ok) in enumerate(zip(timings[ours][1:], within, strict=True), start=2) if not ok]
    plots = [name for name in [plot(setup.out, "conversation_ttft.png", draw)] if name]
    runs = (f"document {name} (exam) as the system message, {len(asked)} turns of its exam questions, each reply "
            f"appended, back to back, {MAX_TOKENS} tokens, greedy, streamed; each side on its own server, one "
            f"after the other; reame {setup.threads} worker(s) x 1 thread, `auto`")
    extra = "; ".join(describe(peer, setup.threads) for peer in setup.peers)
    tables = [table(header, rows), table(["side", *[f"turn {i}" for i in range(1, len(asked) + 1)]], per_turn)]
    return Section("A conversation about a document", goal, how(setup, runs, extra), tables, plots, notes=notes)
