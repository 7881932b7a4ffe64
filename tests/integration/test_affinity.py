"""Each document is read once, even when its questions come back to back or all at once."""

from __future__ import annotations

import concurrent.futures
import uuid
from collections.abc import Iterator

import pytest

from tests.harness import Server, start_server

pytestmark = pytest.mark.integration

FACTS = [
    "The north gate opens at 7:15 and closes at 19:40 every day but Sunday.",
    "A family pass costs 38 euros and covers two adults and three children.",
    "Dogs are welcome on a lead, except in the glasshouses.",
    "The cafe serves hot meals until 14:30 and cakes until closing time.",
    "Guided tours leave from the fountain at 11:00 and 15:00.",
]
QUESTIONS = [
    "When does the north gate close?",
    "How much is a family pass?",
    "Where are dogs not allowed?",
    "When do guided tours leave?",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Two workers; requests wait up to the 60 s cap for the worker reading their document.

    The default bound (twice the observed time to read it again) can run out on a
    machine busy enough to slow the first prefill down mid-way; these tests are about
    where requests go, not about that bound (tests/unit/test_dispatcher_affinity.py).
    """
    running = start_server(tmp_path_factory.mktemp("affinity"), dispatcher_affinity_slack="100")
    yield running
    running.stop()


def new_document() -> str:
    """About 600 tokens no worker has seen: a nonce first, then paragraphs of facts."""
    paragraphs = [f"Visitor rules, edition {uuid.uuid4().hex}."]
    paragraphs += [f"Rule {i}. {fact} This applies on every day the garden is open." for i, fact in
                   enumerate(FACTS * 3)]
    return "\n\n".join(paragraphs)


def ask(server: Server, document: str, question: str) -> int:
    """Ask greedily; return the prompt tokens that were reused, not read."""
    status, _, body = server.post_json("/v1/chat/completions", {
        "model": "m",
        "messages": [{"role": "system", "content": document}, {"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": 8,
    })
    assert status == 200, body
    cached: int = body["usage"]["prompt_tokens_details"]["cached_tokens"]
    return cached


def prefills(server: Server) -> dict[str, int]:
    """Return the dispatcher's prefill counters, as /ready shows them."""
    state = server.ready()
    assert state is not None
    counts: dict[str, int] = state["prefills"]
    return counts


def test_a_question_right_after_another_reuses_the_document(server: Server) -> None:
    document = new_document()
    assert ask(server, document, QUESTIONS[0]) < 50  # at most a chat template's opening
    # Sent at once: the first worker's state may not have reached the store yet,
    # so only routing to the worker that read it makes this reuse.
    assert ask(server, document, QUESTIONS[1]) > 300


def test_questions_arriving_together_cause_one_prefill(server: Server) -> None:
    document = new_document()
    before = prefills(server)
    with concurrent.futures.ThreadPoolExecutor(len(QUESTIONS)) as pool:
        cached = list(pool.map(lambda question: ask(server, document, question), QUESTIONS))
    assert sorted(cached)[0] < 50
    assert all(tokens > 300 for tokens in sorted(cached)[1:]), cached
    after = prefills(server)
    assert after["full"] - before["full"] == 1
    assert after["reused_from_memory"] - before["reused_from_memory"] == len(QUESTIONS) - 1
