"""``auto``: the document as ``facts``, the relevant original lines restated before the question; query's matching."""

from __future__ import annotations

import itertools

from reame.gateway.compress import approximate_tokens, compress, excerpts
from reame.gateway.compress.messages import (
    EXCERPTS_HEADING,
    Policy,
    compress_messages,
    compress_prompt,
    question_of,
)
from reame.gateway.compress.query import fold, rank, terms
from reame.shared.protocol import ChatMessage

FILLER = "We love our wonderful customers and our friendly team is simply the best in town!"
DOCUMENT = "\n\n".join([
    "## Opening times",
    "Open daily 1 April - 31 October, 9:00-19:00. " + FILLER,
    "Closed November to March except for pre-booked groups.",
    "## Deposits",
    "A security deposit of €200 is required for e-bikes. " + FILLER,
    "We cannot accept debit cards for deposits.",
    *(f"Our guided tour number {i} visits a lovely beach and a great café. {FILLER}" for i in range(12)),
])
INSTRUCTION = "Answer in a few words."


def policy(mode: str = "auto") -> Policy:
    return Policy(mode, 64, 120, approximate_tokens, 60)


def ask(question: str, document: str = DOCUMENT) -> list[ChatMessage]:
    return compress_messages(
        [ChatMessage("system", document), ChatMessage("user", f"{question}\n{INSTRUCTION}")], policy()
    ).messages or []


def test_the_document_is_byte_identical_whatever_the_question() -> None:
    first, second = ask("What is the last day of the season?"), ask("How much is the deposit for an e-bike?")
    assert first[0] == second[0]
    # The same bytes as facts, and as a warm request: one KV cache entry serves every mode and question.
    assert first[0].content == compress(DOCUMENT, "facts")
    warmed = compress_messages([ChatMessage("system", DOCUMENT)], policy(), warm=True).messages or []
    assert warmed[0] == first[0]


def test_excerpts_come_from_the_original_text_before_the_untouched_question() -> None:
    question = f"How much is the deposit for an e-bike?\n{INSTRUCTION}"
    (_, user) = ask("How much is the deposit for an e-bike?")
    assert user.content.startswith(EXCERPTS_HEADING + "\n")
    assert user.content.endswith("\n\n" + question)
    quoted = user.content[len(EXCERPTS_HEADING) + 1: -len(question)]
    # Said as the document said it (facts would have written "Security deposit €200 required").
    assert "A security deposit of €200 is required for e-bikes." in quoted
    assert "guided tour" not in quoted and approximate_tokens(quoted) <= policy().excerpt_budget


def test_a_document_in_the_last_user_message_keeps_its_compressed_form_first() -> None:
    content = DOCUMENT + "\n\nCan I pay the deposit with a debit card?"
    out = compress_messages([ChatMessage("user", content)], policy()).messages or []
    document = compress(DOCUMENT, "facts")
    assert out[0].content.startswith(document + "\n\n" + EXCERPTS_HEADING)
    assert out[0].content.endswith("\n\nCan I pay the deposit with a debit card?")
    assert "We cannot accept debit cards for deposits." in out[0].content[len(document):]


def test_a_raw_prompt_gets_the_same_construction() -> None:
    prompt = DOCUMENT + "\n\nWhen does the season end?"
    out = compress_prompt(prompt, policy()).prompt or ""
    assert out.startswith(compress(DOCUMENT, "facts") + "\n\n" + EXCERPTS_HEADING)
    assert "Open daily 1 April - 31 October" in out.split(EXCERPTS_HEADING)[1]
    assert out.endswith("\n\nWhen does the season end?")


def test_the_document_prefix_is_what_comes_before_the_excerpts_whatever_the_question() -> None:
    results = [
        compress_messages([ChatMessage("system", DOCUMENT), ChatMessage("user", question)], policy())
        for question in ("How much is the deposit for an e-bike?", "When does the season end?")
    ]
    for result in results:
        assert result.prefix_messages == [ChatMessage("system", compress(DOCUMENT, "facts"))]
        assert (result.messages or [])[:1] == result.prefix_messages
    # In the last user message: the document part, with the blank line that separates it from the excerpts.
    content = DOCUMENT + "\n\nCan I pay the deposit with a debit card?"
    result = compress_messages([ChatMessage("user", content)], policy())
    (head,) = result.prefix_messages or []
    assert head.content == compress(DOCUMENT, "facts") + "\n\n"
    assert (result.messages or [])[0].content.startswith(head.content + EXCERPTS_HEADING)
    prompt = compress_prompt(DOCUMENT + "\n\nWhen does the season end?", policy())
    assert prompt.prefix_prompt == compress(DOCUMENT, "facts") + "\n\n"
    assert (prompt.prompt or "").startswith(prompt.prefix_prompt + EXCERPTS_HEADING)


def test_in_a_conversation_the_prefix_ends_with_the_document_whatever_the_turns_after_it() -> None:
    # The turns after the document change at every turn: a prefix with them would be new each
    # time, never read, and its warm pre-empted by the next question.
    turns = [ChatMessage("system", DOCUMENT), ChatMessage("user", "How much is the deposit for an e-bike?"),
             ChatMessage("assistant", "It is 50 euros."), ChatMessage("user", "When does the season end?")]
    for messages in (turns[:2], turns):
        result = compress_messages(messages, policy())
        assert result.prefix_messages == [ChatMessage("system", compress(DOCUMENT, "facts"))]


def test_a_later_turn_of_a_conversation_extends_the_turn_before_without_excerpts() -> None:
    # Restated excerpts would sit before each question and be gone from the next turn's history,
    # so each turn would read the previous question and reply again.
    first = [ChatMessage("system", DOCUMENT), ChatMessage("user", "How much is the deposit for an e-bike?")]
    second = [*first, ChatMessage("assistant", "It is 50 euros."), ChatMessage("user", "When does the season end?")]
    third = [*second, ChatMessage("assistant", "In October."), ChatMessage("user", "Can I pay by card?")]
    results = [compress_messages(turn, policy()) for turn in (first, second, third)]
    assert EXCERPTS_HEADING in (results[0].messages or [])[-1].content
    for before, after in itertools.pairwise(results[1:]):
        sent = after.messages or []
        assert all(EXCERPTS_HEADING not in m.content for m in sent)
        assert sent[: len(before.messages or [])] == before.messages
    assert [r.prefix_messages for r in results] == [[ChatMessage("system", compress(DOCUMENT, "facts"))]] * 3


def test_no_prefix_without_excerpts_or_in_another_mode() -> None:
    assert compress_messages([ChatMessage("system", DOCUMENT), ChatMessage("user", "Xylophone?")],
                             policy()).prefix_messages is None
    assert compress_messages([ChatMessage("system", DOCUMENT), ChatMessage("user", "When does the season end?")],
                             policy("facts")).prefix_messages is None
    assert compress_prompt(DOCUMENT + "\n\nWhen does the season end?", policy("query")).prefix_prompt is None


def test_no_block_when_nothing_is_relevant_or_no_question() -> None:
    (_, user) = ask("Xylophone?")
    assert user.content == f"Xylophone?\n{INSTRUCTION}"
    assert excerpts(DOCUMENT, "", 100) == ""


def test_a_short_user_message_is_all_question() -> None:
    assert question_of(f"What is the deposit?\n{INSTRUCTION}", policy()) == f"What is the deposit?\n{INSTRUCTION}"


def test_stems_and_synonyms_of_business_words() -> None:
    assert fold("deliveries") == fold("delivered") == fold("delivery") == fold("deliver")
    assert fold("cancelled") == fold("cancellation") == fold("cancel")
    assert fold("fee") == fold("charges") == fold("cost") == fold("price")
    assert fold("daily") == fold("days") and fold("season") == fold("opening")
    assert "price" in terms("What does it cost?")


def test_query_finds_a_fact_sharing_no_word_with_the_question() -> None:
    doc = compress(DOCUMENT, "facts")
    out = rank(doc, "What is the last day of the season?", 40, approximate_tokens)
    assert "31 October" in out


def test_query_takes_the_line_next_to_a_hit() -> None:
    doc = "\n\n".join([
        "Our shop opens for the season every spring.\nWe welcome riders from 1 April to 31 October.",
        *(f"Tour {i} visits beach number {i} with a guide." for i in range(20)),
    ])
    out = rank(doc, "When is the shop open?", 30, approximate_tokens, relevant_only=True)
    assert "31 October" in out and "Tour" not in out


def test_query_reads_table_rows_under_a_header_the_question_names() -> None:
    doc = "| Plan | Monthly fee |\n| Starter | £5 |\n| Team | £9 |\n\n" + "\n\n".join(
        f"The Team plan has feature number {i}." for i in range(12)
    )
    out = rank(doc, "What does the Team plan cost per month?", 20, approximate_tokens)
    assert "| Team | £9 |" in out and "| Plan | Monthly fee |" in out


def test_excerpts_are_deterministic() -> None:
    question = "Is there a deposit, and can I pay it by debit card?"
    assert excerpts(DOCUMENT, question, 60) == excerpts(DOCUMENT, question, 60)
