"""The fact exam (``--exam DIR``: ``docs/*.txt`` and ``questions.jsonl``) and its grading.

Only the first non-empty line of a reply is graded: OK (``accept`` matches, ``reject``
does not), HALLU (``reject`` matches), MISS. A fact is retained by a compression mode
if the text ``accept`` matches in its ``span`` is still in the compressed document
(case-insensitive, whitespace runs collapsed).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from reame.gateway.compress import compress

INSTRUCTION = "Answer in a few words, on one line, using only the document."
QUICK_WINDOW = 2000  # characters of the document kept around the question's span with --quick


@dataclasses.dataclass(frozen=True)
class Question:
    id: str
    doc: str
    question: str
    accept: str
    reject: str
    span: str
    critical: bool

    @property
    def fact(self) -> str:
        match = re.search(self.accept, self.span, re.I)
        if match is None:
            raise ValueError(f"{self.id}: accept does not match its span")
        return match.group(0)


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def grade(question: Question, reply: str) -> str:
    """Grade the first non-empty line of a reply: OK, HALLU or MISS."""
    line = next((line.strip() for line in reply.splitlines() if line.strip()), "")
    if question.reject and re.search(question.reject, line, re.I):
        return "HALLU"
    if re.search(question.accept, line, re.I):
        return "OK"
    return "MISS"


def load_exam(directory: Path, quick: bool) -> tuple[dict[str, str], list[Question]]:
    """The exam's documents and questions; with ``quick``, one question and a window of its document around it."""
    if not (directory / "questions.jsonl").is_file():
        raise FileNotFoundError(f"no exam in {directory} (docs/*.txt and questions.jsonl): pass --exam DIR")
    docs = {path.name: path.read_text(encoding="utf-8") for path in sorted((directory / "docs").glob("*.txt"))}
    questions = [Question(**json.loads(line)) for line in (directory / "questions.jsonl").read_text().splitlines()
                 if line.strip()]
    if not quick:
        return docs, questions
    for question in questions:
        text = docs[question.doc]
        at = flat(text).find(flat(question.span))
        index = text.find(question.span)
        if index < 0 and at < 0:
            continue
        index = max(0, index if index >= 0 else at)
        start = max(0, index - QUICK_WINDOW // 2)
        return {question.doc: text[start:start + QUICK_WINDOW]}, [question]
    raise ValueError(f"no question of {directory} has its span in its document")


def retained(docs: dict[str, str], questions: list[Question], mode: str) -> tuple[int, int, int, int, dict[str, str]]:
    """Compress every document in ``mode``; return critical kept, critical, all kept, all, and the documents."""
    compressed = {name: compress(text, mode) for name, text in docs.items()}
    crit = crit_total = kept = 0
    for question in questions:
        hit = flat(question.fact) in flat(compressed[question.doc])
        kept += hit
        crit += hit and question.critical
        crit_total += question.critical
    return crit, crit_total, kept, len(questions), compressed
