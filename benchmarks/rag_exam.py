"""Scenario `rag-exam`: what chunk mode costs in accuracy, on the fact exam with three documents a question.

Each question gets its own document and two others of the exam, in an order drawn
by a seeded generator (the same every run), in one user message as `rag` sends
them. One server in chunk mode asks every question twice: in chunk mode and with
``"reame": {"chunks": false}`` (a whole read, prefix reuse only), alternating which
goes first. Correct answers and hallucinations (critical questions' wrong values)
are counted for each.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any

from reame.benchmarks.common import Progress, Setup, Timing, ask, how
from reame.benchmarks.exam import INSTRUCTION, Question, grade, load_exam
from reame.benchmarks.rag import MAX_TOKENS, WARM_UP, messages, three
from reame.benchmarks.report import Cell, Section, bars, median, plot, table
from reame.benchmarks.server import start_server

SEED = 28
SIDES = ("chunks", "parts", "whole")
# How each side asks: chunk mode on one text, chunk mode with each document a text part, read whole.
EXTRA: dict[str, dict[str, Any]] = {"chunks": {}, "parts": {}, "whole": {"extra_body": {"reame": {"chunks": False}}}}
ASKED = {"chunks": "in chunk mode on the documents joined in one text",
         "parts": "in chunk mode with each document a text part", "whole": "with reame.chunks false (read whole)"}
QUICK_QUESTIONS = 1
N_CTX = 8192


def run(setup: Setup) -> Section:
    docs, questions = load_exam(setup.exam, quick=False)
    if len(docs) < 3:
        docs = three(docs, 0)
        questions = [q for q in questions if q.doc in docs] or [
            Question(q.id, name, q.question, q.accept, q.reject, q.span, q.critical)
            for q, name in zip(questions, docs, strict=False)]
    if setup.quick or setup.limit:
        # Round robin over the documents, so a few questions still cover them all.
        by_doc: dict[str, list[Question]] = {}
        for q in questions:
            by_doc.setdefault(q.doc, []).append(q)
        mixed = [q for group in itertools.zip_longest(*by_doc.values()) for q in group if q is not None]
        questions = mixed[: QUICK_QUESTIONS if setup.quick else setup.limit]
    sides = tuple(side for side in SIDES if side in setup.sides) or SIDES
    rng = random.Random(SEED)
    names = sorted(docs)
    requests: dict[str, list[list[dict[str, Any]]]] = {side: [] for side in sides}
    for q in questions:
        company = [q.doc, *rng.sample([n for n in names if n != q.doc], 2)]
        rng.shuffle(company)
        texts = [docs[n][:1500] if setup.quick else docs[n] for n in company]
        for side in sides:
            requests[side].append(messages(texts, q.question, parts=side == "parts"))
    progress = Progress(len(sides) * len(questions), "rag-exam")
    timings: dict[str, list[Timing]] = {side: [] for side in sides}
    overrides = setup.overrides(workers_threads=str(setup.threads), cache_chunks="true",
                                model_n_ctx=str(max(setup.n_ctx, N_CTX)))  # three whole documents
    server = start_server(setup.tmp / "rag-exam", 1, **overrides)
    try:
        client = server.client(timeout=1800)
        ask(client, WARM_UP, 1)
        for i in range(len(questions)):
            for side in sides if i % 2 == 0 else sides[::-1]:
                timings[side].append(ask(client, requests[side][i], MAX_TOKENS, **EXTRA[side]))
                progress.step(side)
    finally:
        progress.close()
        server.stop()
    return report(setup, questions, timings)


def report(setup: Setup, questions: list[Question], timings: dict[str, list[Timing]]) -> Section:
    sides = tuple(timings)
    grades = {side: [grade(q, t.text) for q, t in zip(questions, ts, strict=True)] for side, ts in timings.items()}
    correct = {side: grades[side].count("OK") for side in sides}
    wrong = {side: sum(g == "HALLU" and q.critical for g, q in zip(grades[side], questions, strict=True))
             for side in sides}
    rows: list[list[Cell]] = [
        [side, f"{correct[side]} of {len(questions)}", wrong[side], median([t.ttft_s for t in timings[side]]),
         sum(t.prompt_tokens or 0 for t in timings[side])]
        for side in sides
    ]
    header = ["side", "correct", "critical wrong answers", "median TTFT s", "prompt tokens"]
    goal = [compared(side, questions, grades, correct, wrong) for side in sides if side != "whole" and "whole" in sides]
    runs = (f"{len(questions)} exam question(s), each with its document and two others in a seeded order "
            f"(seed {SEED}), {INSTRUCTION!r} after the question, {MAX_TOKENS} tokens, greedy; one server "
            "(1 worker) in chunk mode, each question asked " + ", ".join(ASKED[side] for side in sides)
            + ", alternating the order")

    def draw(axes: Any) -> None:
        series: dict[str, Sequence[float]] = {side: [float(correct[side]), float(wrong[side])] for side in sides}
        bars(axes, ["correct", "critical wrong"], series, "questions")
        axes.set_title("The exam with three documents a question")

    plots = [name for name in [plot(setup.out, "rag_exam.png", draw)] if name]
    return Section("Chunk mode's accuracy: the exam with three documents a question", goal, how(setup, runs),
                   [table(header, rows)], plots)


def compared(side: str, questions: list[Question], grades: dict[str, list[str]], correct: dict[str, int],
             wrong: dict[str, int]) -> str:
    """The issue's goal for one chunk side against the whole read: within 2 correct, no more critical wrong."""
    met = correct["whole"] - correct[side] <= 2 and wrong[side] <= wrong["whole"]
    differ = [q.id for q, a, b in zip(questions, grades[side], grades["whole"], strict=True) if a != b]
    return (f"{side}: {correct[side]} correct against {correct['whole']} read whole, critical wrong answers "
            f"{wrong[side]} against {wrong['whole']} (goal: within 2, no more wrong: {'met' if met else 'NOT met'}); "
            f"graded differently: {', '.join(differ) or 'none'}")
