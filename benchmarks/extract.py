"""Scenario `extract`: the exam's facts extracted into a JSON schema, speculative decoding off against lookup.

For each exam document, one request asks for all its exam questions at once as the
fields of a ``json_schema`` response_format (one nullable short string per question,
named from the question's words, every one required, nothing else allowed): the values
are facts written in the document, so a reply copies from its prompt under the grammar.
The document is the system message, the field list the user message, greedy, to reame
with one worker, `"reame": {"speculative": "off"}` and `"lookup"` back to back in a
rotating order (the document's KV state is kept: decode speed excludes the prompt).
Reported per mode: the share of replies that are valid JSON for the schema (checked with
jsonschema when it is installed, else strictly by hand), field accuracy (a value is right
when the question's `accept` matches it and its `reject` does not) and decode tok/s.
Goals: valid JSON 100 %, lookup/off decode speed >= 1.3x.
"""

from __future__ import annotations

import importlib
import json
import re
import statistics
from typing import Any, Final

from reame.benchmarks.common import Progress, Setup, Timing, ask, chat, how
from reame.benchmarks.exam import Question, flat, grade
from reame.benchmarks.report import Section, bars, median, plot, ratio, table
from reame.benchmarks.server import start_server

MODES: Final = ("off", "lookup")
MAX_VALUE_CHARS: Final = 80  # a fact is a few words; the bound keeps every reply within MAX_TOKENS
MAX_TOKENS: Final = 800
QUICK_CHARS: Final = 2000  # --quick: this much of one document, with the questions it answers
GOAL: Final = 1.3
REPLIES: Final = "extract_replies.jsonl"  # in --out: every reply, for reading what was extracted
_FILLER: Final = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how", "in", "is", "it",
    "its", "many", "much", "of", "on", "or", "the", "to", "what", "when", "which", "who", "with",
})


def field_name(question: str, taken: set[str]) -> str:
    """Return a short snake_case name made of the question's first content words, unique among ``taken``."""
    words = [w for w in re.findall(r"[a-z0-9]+", question.lower()) if w not in _FILLER]
    base = "_".join(words[:4]) or "field"
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def schema_for(questions: list[Question]) -> tuple[dict[str, Any], dict[str, Question]]:
    """Return the JSON schema of one document's fields and which question each field answers."""
    taken: set[str] = set()
    fields = {field_name(q.question, taken): q for q in questions}
    value = {"anyOf": [{"type": "string", "maxLength": MAX_VALUE_CHARS}, {"type": "null"}]}
    schema = {"type": "object", "properties": {name: value for name in fields}, "required": list(fields),
              "additionalProperties": False}
    return schema, fields


def instruction(fields: dict[str, Question]) -> str:
    lines = ["Extract these fields from the document as a JSON object. Copy each value from the document, "
             "in a few words; use null when the document does not say."]
    lines += [f"- {name}: {q.question}" for name, q in fields.items()]
    return "\n".join(lines)


def valid(text: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    """Return the reply's object if it is JSON valid for ``schema``, else None."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    try:
        jsonschema: Any = importlib.import_module("jsonschema")  # the test extra has it; no stubs
    except ImportError:  # a strict check of what schema_for builds
        names = schema["properties"]
        ok = isinstance(value, dict) and set(value) == set(names) and all(
            v is None or (isinstance(v, str) and len(v) <= MAX_VALUE_CHARS) for v in value.values())
        return value if ok else None
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return None
    return value if isinstance(value, dict) else None


def documents(setup: Setup) -> list[tuple[str, str, list[Question]]]:
    """The exam's documents with their questions; --quick: the start of the one that answers most of its questions."""
    exam = setup.exam
    if not (exam / "questions.jsonl").is_file():
        raise FileNotFoundError(f"no exam in {exam} (docs/*.txt and questions.jsonl): pass --exam DIR")
    questions = [Question(**json.loads(line)) for line in (exam / "questions.jsonl").read_text().splitlines()
                 if line.strip()]
    docs = []
    for path in sorted((exam / "docs").glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        if setup.quick:
            text = text[:QUICK_CHARS]
        mine = [q for q in questions if q.doc == path.name and flat(q.span) in flat(text)]
        if mine:
            docs.append((path.name, text, mine))
    if not docs:
        raise ValueError(f"no document of {exam} has questions" + (" in its start (--quick)" if setup.quick else ""))
    return [max(docs, key=lambda doc: len(doc[2]))] if setup.quick else docs


def run(setup: Setup) -> Section:
    docs = documents(setup)
    rounds = 1 if setup.quick else 2
    progress = Progress(len(docs) * rounds * len(MODES), "extract")
    runs: dict[tuple[str, str], list[tuple[Timing, dict[str, Any] | None]]] = {}
    server = None
    try:
        server = start_server(setup.tmp / "extract", workers=1,
                              **setup.overrides(workers_threads=str(setup.threads)))
        client = server.client(timeout=900)
        for index, (name, text, questions) in enumerate(docs):
            schema, fields = schema_for(questions)
            response_format = {"type": "json_schema", "json_schema": {"name": "facts", "schema": schema,
                                                                      "strict": True}}
            for round_ in range(rounds):
                shift = (index + round_) % len(MODES)
                for mode in MODES[shift:] + MODES[:shift]:
                    timing = ask(client, chat(text, instruction(fields)), MAX_TOKENS, response_format=response_format,
                                 extra_body={"reame": {"speculative": mode, "answer_cache": False}})
                    runs.setdefault((name, mode), []).append((timing, valid(timing.text, schema)))
                    progress.step(f"{name} {mode}")
    finally:
        progress.close()
        if server is not None:
            server.stop()
    setup.out.mkdir(parents=True, exist_ok=True)
    with open(setup.out / REPLIES, "w", encoding="utf-8") as replies:  # to see what was extracted, and how well
        for (name, mode), got in runs.items():
            for timing, value in got:
                replies.write(json.dumps({"document": name, "mode": mode, "valid": value is not None,
                                          "tokens": timing.tokens, "reply": timing.text}) + "\n")
    return report(setup, docs, runs, rounds)


def accuracy(fields: dict[str, Question], value: dict[str, Any] | None) -> int:
    """Return how many fields of a valid reply hold the right fact."""
    if value is None:
        return 0
    return sum(grade(q, value.get(name) or "") == "OK" for name, q in fields.items())


def report(setup: Setup, docs: list[tuple[str, str, list[Question]]],
           runs: dict[tuple[str, str], list[tuple[Timing, dict[str, Any] | None]]], rounds: int) -> Section:
    speed = {key: median([t.decode_tps for t, _ in got]) for key, got in runs.items()}
    rows: list[list[Any]] = []
    # valid replies, finished replies, right fields, fields, replies cut by max_tokens. A cut reply
    # cannot be whole JSON (finish_reason "length", as the API says), so it is counted apart.
    totals = {mode: [0, 0, 0, 0, 0] for mode in MODES}
    for name, _, questions in docs:
        fields = schema_for(questions)[1]
        row: list[Any] = [name, len(fields)]
        for mode in MODES:
            got = runs[(name, mode)]
            right = sum(accuracy(fields, value) for _, value in got)
            cut = sum(t.tokens >= MAX_TOKENS for t, _ in got)
            counts = (sum(value is not None for _, value in got), len(got) - cut, right, len(fields) * len(got), cut)
            totals[mode] = [a + b for a, b in zip(totals[mode], counts, strict=True)]
            valid_column = f"{counts[0]}/{counts[1]}" + (f" ({cut} cut)" if cut else "")
            row += [valid_column, f"{right}/{counts[3]}", got[0][0].tokens, speed[(name, mode)]]
        same = all(t.text == runs[(name, "off")][0][0].text for t, _ in runs[(name, "lookup")])
        drafted = runs[(name, "lookup")][0][0]
        rows.append([*row, f"{drafted.accepted_draft_tokens}/{drafted.draft_tokens}",
                     ratio(speed[(name, "lookup")], speed[(name, "off")]), "yes" if same else "no"])
    header = ["document", "fields"]
    for mode in MODES:
        header += [f"{mode}: valid JSON", f"{mode}: right fields", f"{mode}: tokens", f"{mode}: decode tok/s"]
    header += ["lookup: drafts accepted", "lookup / off", "same text"]
    gain = statistics.geometric_mean([max(1e-9, ratio(speed[(n, "lookup")], speed[(n, "off")])) for n, _, _ in docs])
    goal = []
    for mode in MODES:
        ok, replies, right, asked, cut = totals[mode]
        goal.append(f"{mode}: valid JSON {100 * ok / max(1, replies):.0f} % of {replies} finished replies (goal 100 %: "
                    f"{'met' if ok == replies else 'NOT met'}), {cut} cut by max_tokens ({MAX_TOKENS}); "
                    f"fields right {100 * right / max(1, asked):.0f} %; "
                    f"decode {median([speed[(n, mode)] for n, _, _ in docs]):.1f} tok/s (median of the documents)")
    goal.append(f"lookup/off decode speed under the grammar {gain:.2f}x (goal >= {GOAL}: "
                f"{'met' if gain >= GOAL else 'NOT met'}; geometric mean of the documents)")

    def draw(axes: Any) -> None:
        names = [n.removesuffix(".txt") for n, _, _ in docs]
        bars(axes, names, {mode: [speed[(n, mode)] for n, _, _ in docs] for mode in MODES}, "decode tokens/s")
        axes.set_title("Extraction into a JSON schema: decode speed, speculative off and lookup")

    plots = [name for name in [plot(setup.out, "extract_decode.png", draw)] if name]
    runs_text = (f"{len(docs)} document(s) x {rounds} round(s) per mode, {MAX_TOKENS} tokens at most, greedy, "
                 "medians; reame 1 worker, the document's KV state kept between requests")
    notes = [f"every reply is in `{REPLIES}` beside this report"]
    return Section("Extraction into a JSON schema", goal, how(setup, runs_text), [table(header, rows, 1)], plots,
                   notes)
