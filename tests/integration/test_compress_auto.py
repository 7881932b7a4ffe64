"""``auto`` through the whole stack: the second question about a document restores it from the cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Server, start_server, wait_for_entries
from tests.integration.test_compress import DOCUMENT

pytestmark = pytest.mark.integration


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path, workers=1)
    yield running
    assert not running.stop()


def ask(server: Server, question: str) -> dict[str, Any]:
    status, _, body = server.post_json("/v1/chat/completions", {
        "model": "m",
        "messages": [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": 16,
        "reame": {"compress": "auto"},
    })
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def test_auto_answers_the_second_question_from_the_cached_document(server: Server) -> None:
    first = ask(server, "How much does the Cedar room cost per hour?")
    assert first["choices"][0]["message"]["content"].strip()
    assert first["usage"]["reame"]["compression"] == "auto"
    wait_for_entries(server, 1)
    second = ask(server, "How many people does the Elm room seat?")
    usage = second["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    # The document part is the same bytes whatever the question; only the excerpts and the question are read.
    assert cached > 0
    assert usage["reame"]["read_tokens"] == usage["prompt_tokens"] - cached
    assert usage["reame"]["read_tokens"] < cached
    assert usage["reame"]["compression"] == "auto"
