"""Scenario `compress`: the fact exam with compression off, lossless and facts, and on the peers.

Each question is asked with its document as the system message and the question plus
an instruction to answer briefly as the user message, greedy, of reame in each mode
(`"reame": {"compress": mode}`) and of each peer (which reads the document as it is),
the sides of a document in a rotating order. "Cold" is each document's first question
on a side (the whole prompt is read), "warm" the others. Retention and size per mode
are computed here, without a server, with the model's tokenizer.
Goals for facts: at least 50 % fewer tokens, every fact retained, accuracy not lower than off.
"""

from __future__ import annotations

import contextlib
from typing import Any

from reame.benchmarks import peers
from reame.benchmarks.common import Progress, Setup, Timing, ask, chat, how
from reame.benchmarks.exam import INSTRUCTION, Question, grade, load_exam, retained
from reame.benchmarks.report import Section, bars, median, plot, ratio, table
from reame.benchmarks.server import start_server

MODES = ("off", "lossless", "facts")
MAX_TOKENS = 32


def run(setup: Setup) -> Section:
    docs, questions = load_exam(setup.exam, setup.quick)
    sides = (*setup.peers, *MODES)
    progress = Progress(len(sides) * len(questions), "compress")
    answers: dict[str, list[tuple[Question, Timing, bool]]] = {side: [] for side in sides}
    try:
        with contextlib.ExitStack() as stack:
            reame = start_server(setup.tmp / "compress", 1, **setup.overrides(workers_threads=str(setup.threads)))
            stack.callback(reame.stop)
            ours = reame.client(timeout=900)
            clients = {peer: stack.enter_context(peers.serving(setup, peer, "compress")) for peer in setup.peers}
            for index, name in enumerate(docs):
                mine = [q for q in questions if q.doc == name]
                shift = index % len(sides)
                for side in sides[shift:] + sides[:shift]:
                    client = clients.get(side, ours)
                    extra: dict[str, Any] = {} if side in clients else {"extra_body": {"reame": {"compress": side}}}
                    for i, question in enumerate(mine):
                        messages = chat(docs[name], f"{question.question}\n{INSTRUCTION}")
                        answers[side].append((question, ask(client, messages, MAX_TOKENS, **extra), i == 0))
                        progress.step(f"{side} {question.id}")
    finally:
        progress.close()
    return report(setup, docs, questions, answers)


def size_rows(setup: Setup, docs: dict[str, str], questions: list[Question]) -> list[list[Any]]:
    from reame.gateway.compress.tokenizer import Tokenizer

    tokenizer = Tokenizer(setup.model)
    tokenizer.load()
    original = sum(tokenizer.count(text) for text in docs.values())
    rows: list[list[Any]] = []
    for mode in MODES:
        if mode == "off":
            crit, crit_total, kept, total, texts = 0, 0, len(questions), len(questions), docs
            crit = crit_total = sum(q.critical for q in questions)
        else:
            crit, crit_total, kept, total, texts = retained(docs, questions, mode)
        tokens = sum(tokenizer.count(text) for text in texts.values())
        rows.append([mode, f"{crit}/{crit_total}", f"{kept}/{total}", tokens, f"{100 * (1 - tokens / original):.1f} %"])
    return rows


def report(setup: Setup, docs: dict[str, str], questions: list[Question],
           answers: dict[str, list[tuple[Question, Timing, bool]]]) -> Section:
    rows: list[list[Any]] = []
    summary: dict[str, tuple[int, float, float]] = {}
    for side in answers:
        got = answers[side]
        grades = [grade(q, t.text) for q, t, _ in got]
        ok = grades.count("OK")
        crit = [g for (q, _, _), g in zip(got, grades, strict=True) if q.critical]
        prompt = [t.prompt_tokens for _, t, _ in got if t.prompt_tokens is not None]
        cold = median([t.ttft_s for _, t, first in got if first])
        warm = median([t.ttft_s for _, t, first in got if not first])
        summary[side] = (ok, cold, sum(prompt) / len(prompt) if prompt else float("nan"))
        mean_prompt = round(summary[side][2]) if prompt else None
        name = f"{side} (reads it as it is)" if side in setup.peers else f"reame {side}"
        rows.append([name, f"{ok}/{len(got)}", grades.count("MISS"), grades.count("HALLU"),
                     f"{crit.count('OK')}/{len(crit)}", mean_prompt, cold, warm])
    header = ["server, mode", "OK", "MISS", "HALLU", "critical OK", "prompt tokens (mean)", "TTFT cold s",
              "TTFT warm s"]
    sizes = size_rows(setup, docs, questions)
    off, facts = summary["off"], summary["facts"]
    reduction = 1 - ratio(facts[2], off[2])
    goal = [f"facts reads {ratio(facts[2], off[2]):.3f} of off's prompt tokens, a reduction of {100 * reduction:.1f} % "
            f"(goal >= 50 %: {'met' if reduction >= 0.5 else 'NOT met'})",
            f"facts retains {sizes[2][1]} critical facts and {sizes[2][2]} of all (goal: all)",
            f"accuracy facts {facts[0]}/{len(questions)} against off {off[0]}/{len(questions)} "
            f"(goal: not lower: {'met' if facts[0] >= off[0] else 'NOT met'})"
            + "".join(f"; {peer} {summary[peer][0]}" for peer in setup.peers),
            f"cold TTFT facts/off {ratio(facts[1], off[1]):.3f}"
            + "".join(f"; reame off/{peer} {ratio(off[1], summary[peer][1]):.3f}" for peer in setup.peers),
            *peers.missing_lines(setup)]

    def draw(axes: Any) -> None:
        bars(axes, [side if side in setup.peers else f"reame {side}" for side in answers],
             {"TTFT cold (s)": [summary[side][1] for side in answers]}, "seconds")
        axes.set_title("Cold time to first token per compression mode")

    plots = [name for name in [plot(setup.out, "compress_ttft.png", draw)] if name]
    runs = (f"{len(docs)} document(s), {len(questions)} question(s) per side, {MAX_TOKENS} tokens, greedy; "
            "reame 1 worker")
    size_table = table(["mode", "critical facts retained", "all facts retained", "document tokens", "reduction"],
                       sizes)
    extra = "; ".join(peers.describe(peer, setup.threads) for peer in setup.peers)
    return Section("Prompt compression", goal, how(setup, runs, extra), [table(header, rows), size_table], plots)
