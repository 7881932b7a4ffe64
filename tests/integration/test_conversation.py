"""The default mode in real use: a conversation's turns, a document in the system message, a long paragraph.

Counts of tokens read and cached (``usage``), never timings: the same counts hold on
any CPU, however busy.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tests.harness import Server

pytestmark = pytest.mark.integration

# Slack for the turn boundary: the reply re-tokenized inside the chat template may split
# differently from the tokens generated, and the last sampled token is never evaluated.
BOUNDARY_TOKENS = 8

FILLER = [
    f"Item {i} of the spring catalogue ships from the northern warehouse within {2 + i % 3} working days."
    for i in range(70)
]
PARAGRAPH = " ".join([*FILLER[:40], "The secret code word is PELICAN-77.", *FILLER[40:]])
HANDBOOK = "\n".join(
    f"Rule {i}. Meeting room {name} seats {seats} people and costs {price} euros per hour; "
    f"bookings close {hours} hours ahead and are refunded only if cancelled the day before."
    for i, (name, seats, price, hours) in enumerate(
        [("Cedar", 8, 25, 2), ("Elm", 12, 40, 4), ("Oak", 20, 65, 6), ("Pine", 4, 15, 1)] * 4
    )  # about 600 tokens: over query's budget, read in seconds on one core
)
QUESTIONS = [
    "How much does the Cedar room cost per hour?",
    "How many people does the Elm room seat?",
    "When do bookings for the Oak room close?",
    "What does the Pine room cost?",
    "Is a booking refunded if cancelled on the day?",
    "Which room seats the most people?",
]


def chat(server: Server, messages: list[dict[str, str]], compress: str | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"model": "m", "messages": messages, "temperature": 0, "max_tokens": 12}
    if compress is not None:
        payload["reame"] = {"compress": compress}
    status, _, body = server.post_json("/v1/chat/completions", payload)
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def cached(body: dict[str, Any]) -> int:
    return int(body["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_each_turn_of_a_short_chat_reuses_the_whole_previous_turn(server: Server) -> None:
    """Each turn goes to the worker holding the previous one, which reads only the new turn."""
    messages: list[dict[str, str]] = []
    previous: tuple[int, int] | None = None  # prompt and completion tokens of the turn before
    for turn in ("Hello! Who are you?", "Tell me a fact about the sea.", "And one about rivers.",
                 "Which is larger?", "Thank you, goodbye."):
        messages.append({"role": "user", "content": turn})
        body = chat(server, messages)
        usage = body["usage"]
        if previous is not None:
            assert cached(body) >= sum(previous) - BOUNDARY_TOKENS, (len(messages), usage, previous)
        previous = usage["prompt_tokens"], usage["completion_tokens"]
        messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})


@pytest.mark.parametrize("mode", ["query", "auto"])
def test_a_document_in_one_long_paragraph_is_not_dropped(server: Server, mode: str) -> None:
    """A one-paragraph document larger than query's budget keeps its matching sentences."""
    question = {"role": "user", "content": "What is the secret code word?"}
    alone = chat(server, [question], "off")["usage"]["prompt_tokens"]
    body = chat(server, [{"role": "system", "content": PARAGRAPH}, question], mode)
    usage = body["usage"]
    assert usage["reame"]["compression"] in ("query", "auto"), usage
    # The sentence with the code word is about 10 tokens; a dropped document left the question alone.
    assert alone + 8 <= usage["prompt_tokens"] < usage["reame"]["uncompressed_prompt_tokens"], (alone, usage)


def test_a_document_in_the_system_message_is_read_once_however_fast_the_turns_come(server: Server) -> None:
    """Turns sent as soon as the answer before arrives: the document is read for the second turn
    at the latest (a background warm pre-empted by every question would never finish), and every
    later turn restores it, reading only its own new text."""
    messages: list[dict[str, str]] = [{"role": "system", "content": HANDBOOK}]
    bodies: list[dict[str, Any]] = []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        body = chat(server, messages, "auto")
        bodies.append(body)
        messages.append({"role": "assistant", "content": body["choices"][0]["message"]["content"]})
    modes = [body["usage"]["reame"]["compression"] for body in bodies]
    assert modes[0] == "query" and all(mode == "auto" for mode in modes[1:]), modes
    for before, body in itertools.pairwise(bodies[1:]):  # from the third turn: the second reads the document
        usage = body["usage"]
        new = usage["prompt_tokens"] - before["usage"]["prompt_tokens"]  # the reply before and this question
        # A later turn restates no excerpts (gateway.compress.messages): it extends the turn before.
        assert usage["reame"]["read_tokens"] <= new + BOUNDARY_TOKENS, (usage, new)
