"""`reame bench exam` and `conversation`'s pure parts: which questions are asked, how answers are counted."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("openai")  # reame.benchmarks needs the test or bench extra

from reame.benchmarks.common import Setup, Timing  # after the skip
from reame.benchmarks.conversation import read_within
from reame.benchmarks.exam import Question
from reame.benchmarks.exam_modes import HARD_QUESTIONS, Answer, goals, questions_of, summary

EXAM = Path(__file__).resolve().parents[1] / "data" / "exam"  # the repository's own: CI has no ../shared
SETUP = Setup(model=Path("m.gguf"), draft_model=None, exam=EXAM, out=Path("out"), threads=1, quick=False,
              n_ctx=4096, tmp=Path("tmp"))


def _timing(text: str, prompt: int | None, cached: int, compression: str = "auto", ttft: float = 1.0) -> Timing:
    return Timing(ttft, ttft, 4, 0.0, cached, prompt, text, compression=compression)


def _question(critical: bool = True) -> Question:
    return Question("t-01", "t.txt", "What is the price?", r"\b42\b", r"\b41\b", "It costs 42.", critical)


def test_limit_keeps_the_first_questions_of_each_document_and_hard_adds_only_known_documents() -> None:
    docs, everything = questions_of(SETUP)
    _, two = questions_of(dataclasses.replace(SETUP, limit=2))
    first_two = [q.id for i, q in enumerate(everything) if sum(p.doc == q.doc for p in everything[: i + 1]) <= 2]
    assert [q.id for q in two] == first_two and len(two) < len(everything)
    _, hard = questions_of(dataclasses.replace(SETUP, hard=True))
    assert HARD_QUESTIONS.is_file() and len(hard) >= len(everything)
    assert all(q.doc in docs for q in hard)


def test_summary_counts_grades_critical_wrong_and_later_answers_from_the_cache() -> None:
    q = _question()
    answers = [Answer(q, "auto", _timing("42", 500, 0, "query"), True),
               Answer(q, "auto", _timing("41", 520, 500), False),  # from the cache, wrong
               Answer(q, "auto", _timing("no idea", 520, 100, ttft=3.0), False)]  # read again
    figures = summary(answers)
    assert (figures["OK"], figures["HALLU"], figures["MISS"]) == (1, 1, 1)
    assert figures["critical"] - figures["critical OK"] == 2
    assert (figures["from cache"], figures["later"], figures["as query"]) == (1, 2, 1)
    assert figures["read first"] == 500 and figures["read later"] == (20 + 420) / 2


def test_goals_compare_auto_with_query_and_say_when_auto_is_missing() -> None:
    q = _question()
    auto = summary([Answer(q, "auto", _timing("42", 500, 0), True), Answer(q, "auto", _timing("42", 500, 480), False)])
    query = summary([Answer(q, "query", _timing("41", 500, 0), True)])
    lines = goals({"query": query, "auto": auto})
    assert "1 of 1 later questions answered from the cached document" in lines[0] and "met" in lines[0]
    assert "goal: no worse: met" in lines[1]
    assert "NOT met" in goals({"query": auto, "auto": query})[1]
    assert "no goal" in goals({"query": query})[0]


def test_a_turn_reads_within_what_it_added_or_is_unknown_without_usage() -> None:
    turns = [_timing("a", 500, 0), _timing("b", 540, 500), _timing("c", 700, 540), _timing("d", None, 0)]
    assert read_within(turns, [40, 60, 40]) == [True, False, False]
