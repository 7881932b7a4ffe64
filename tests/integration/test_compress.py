"""Prompt compression through the whole stack: fewer tokens read, the same prefix cached."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Server, start_server, wait_for_entries

pytestmark = pytest.mark.integration

FILLER = [
    "We are so proud of our wonderful, friendly team and we love all of our customers!",
    "Thank you for choosing us, it is truly a delight to welcome you to our amazing family.",
    "Our passionate experts are always happy to help you enjoy the best experience in town!",
]
ROOMS = ["Oak", "Birch", "Cedar", "Maple", "Willow", "Rowan", "Hazel", "Alder", "Aspen", "Elm", "Larch", "Yew"]
# Distinct facts, each followed by filler: compressed it stays well over cache.min_tokens (256).
DOCUMENT = "Harbour Street Rooms: terms of hire.\n\n" + "\n\n".join(
    f"The {room} room seats {8 + 2 * i} people and costs £{20 + 5 * i} per hour, "
    f"bookable from {7 + i % 3}:00 to {18 + i % 4}:30. {FILLER[i % 3]}"
    for i, room in enumerate(ROOMS)
)


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path, workers=1)
    yield running
    assert not running.stop()


def ask(server: Server, question: str, document: str = DOCUMENT) -> dict[str, Any]:
    status, _, body = server.post_json("/v1/chat/completions", {
        "model": "m",
        "messages": [{"role": "system", "content": document}, {"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": 16,
        "reame": {"compress": "facts"},
    })
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def test_a_compressed_document_is_answered_reads_fewer_tokens_and_is_reused(server: Server) -> None:
    first = ask(server, "How much does the Cedar room cost per hour?")
    assert first["choices"][0]["message"]["content"].strip()
    usage = first["usage"]
    assert usage["prompt_tokens"] < usage["reame"]["uncompressed_prompt_tokens"]
    assert usage["prompt_tokens"] <= 0.8 * usage["reame"]["uncompressed_prompt_tokens"]
    wait_for_entries(server, 1)
    second = ask(server, "How many people does the Elm room seat?")
    # The compressed document is the same bytes whatever the question: its KV state is reused.
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0.8 * usage["prompt_tokens"]


def test_a_document_warmed_compressed_is_reused_by_compressed_questions(server: Server) -> None:
    document = DOCUMENT.replace("Harbour Street", "Quay Road")
    status, _, warm = server.post_json("/v1/cache/warm", {
        "messages": [{"role": "system", "content": document}], "reame": {"compress": "facts"},
    })
    assert status == 200 and warm["cached"] is True, warm
    answer = ask(server, "Which room seats 12 people?", document)
    assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0.8 * warm["usage"]["prompt_tokens"]
