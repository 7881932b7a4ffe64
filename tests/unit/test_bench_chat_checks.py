"""The `conversation` scenario's short-chat and code-word checks: what they count as met."""

from __future__ import annotations

from reame.benchmarks import chat_checks
from reame.benchmarks.common import Timing


def turn(prompt: int, cached: int, reply: int, text: str = "ok") -> Timing:
    return Timing(0.1, 0.2, reply, 10.0, cached, prompt, text)


def test_a_turn_reuses_the_one_before_when_its_prompt_and_reply_are_cached_within_the_boundary() -> None:
    chat = [turn(44, 28, 20), turn(99, 56, 20), turn(154, 73, 20)]
    # 56 >= 44 + 20 - 8; 73 < 99 + 20 - 8 (the turn before last only: another worker's)
    assert chat_checks.reused(chat) == [True, False]


def test_the_report_says_which_goal_is_not_met_and_shows_each_answer() -> None:
    chat = [turn(44, 0, 20), turn(99, 60, 20)]
    answers = {"auto": turn(60, 0, 8, "The code word is PELICAN-77."), "query": turn(23, 0, 8, "I do not know."),
               "off": turn(1216, 0, 8, "PELICAN-77")}
    goal, tables = chat_checks.report(chat, answers)
    assert goal[0].endswith("in 1 of 1 (goal: all: met)")
    assert goal[1].endswith("auto yes, query NO (goal: both: NOT met); read whole (off) yes")
    assert "| query |  | 23 | I do not know. | NO |" in tables[1]


def test_the_document_is_one_paragraph_over_query_s_budget_with_the_code_word_inside() -> None:
    text = chat_checks.one_paragraph()
    assert "\n" not in text and chat_checks.CODE_WORD in text
    assert text.index(chat_checks.CODE_WORD) > len(text) // 2
