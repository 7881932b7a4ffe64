"""``auto`` through the whole stack: the first question about a document answered as query, the next from the cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import Server, start_server
from tests.integration.test_compress import DOCUMENT
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

# Longer than query's budget (compress.query_budget, 512 tokens) once compressed, so that
# query's text is not the whole document: the first answer then reads only part of it.
HANDBOOK = DOCUMENT + "\n\n" + "\n\n".join(
    f"Rule {i}: a booking of more than {i + 2} hours needs a deposit of £{10 * i}; "
    f"cancelling it less than {i % 6 + 1} days ahead costs {5 * i} % of the price."
    for i in range(1, 40)
)


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path, workers=1, workers_threads="2")  # both cores: it reads a long document
    yield running
    assert not running.stop()


def ask(server: Server, question: str) -> dict[str, Any]:
    status, _, body = server.post_json("/v1/chat/completions", {
        "model": "m",
        "messages": [{"role": "system", "content": HANDBOOK}, {"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": 16,
        "reame": {"compress": "auto"},
    })
    assert status == 200, body
    return body  # type: ignore[no-any-return]


def test_auto_answers_the_first_question_from_query_and_the_next_from_the_cached_document(server: Server) -> None:
    """The first question about a new document is answered from query's short text while the
    document is read in the background; once it is read, the next question reuses it."""
    first = ask(server, "How much does the Cedar room cost per hour?")
    assert first["choices"][0]["message"]["content"].strip()
    assert first["usage"]["reame"]["compression"] == "query"

    def warmed() -> dict[str, Any] | None:
        ready = server.ready()
        return ready if ready is not None and ready["prefills"]["warms_finished"] >= 1 else None

    prefills = wait_for(warmed, what="the background warm of the document to finish")["prefills"]
    assert prefills["warms_started"] >= 1
    second = ask(server, "How many people does the Elm room seat?")
    usage = second["usage"]
    cached = usage["prompt_tokens_details"]["cached_tokens"]
    # The document part is the same bytes whatever the question; only the excerpts and the question are read.
    assert usage["reame"]["compression"] == "auto"
    assert cached > 0
    assert usage["reame"]["read_tokens"] == usage["prompt_tokens"] - cached
    assert usage["reame"]["read_tokens"] < cached
    status, _, metrics = server.request("GET", "/metrics")
    finished = [line for line in metrics.decode().splitlines()
                if line.startswith("reame_background_warms_total{") and 'event="finished"' in line]
    assert status == 200 and len(finished) == 1 and float(finished[0].rsplit(" ", 1)[1]) >= 1


def test_a_document_read_ahead_is_answered_in_auto_at_once(tmp_path: Path) -> None:
    """With auto configured (the default), a document read ahead (/v1/cache/warm, as the web
    page's "Read" button does) is in the cache, so the first question already gets auto."""
    server = start_server(tmp_path, workers=1, workers_threads="2", compress_mode="auto")
    try:
        document = [{"role": "system", "content": HANDBOOK}]
        status, _, warm = server.post_json("/v1/cache/warm", {"messages": document})
        assert status == 200, warm
        status, _, answer = server.post_json("/v1/chat/completions", {
            "messages": [*document, {"role": "user", "content": "How many people does the Elm room seat?"}],
            "temperature": 0, "max_tokens": 8,
        })
        assert status == 200, answer
        usage = answer["usage"]
        assert usage["reame"]["compression"] == "auto"
        assert usage["reame"]["read_tokens"] < usage["prompt_tokens_details"]["cached_tokens"]
    finally:
        assert not server.stop()
