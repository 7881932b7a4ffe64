"""Chunk mode (cache.chunks) on the real model, through the real gateway, dispatcher, workers and cachekeeper.

Documents sent in another order and company are placed from the store, by any
worker, after a restart; the greedy text is the same whether the chunks were read
or placed; a model whose cache cannot move positions reads prompts as before.
"""

from __future__ import annotations

import concurrent.futures
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from reame.shared.config import load
from reame.shared.model_file import ModelFileError, model_path
from reame.shared.protocol import ChatMessage, Done, Generate, Message, SamplingParams
from reame.worker.engine import Engine
from reame.worker.model import Model
from tests.harness import Server, cache_stats, start_server, wait_for_entries
from tests.waiting import wait_for

pytestmark = pytest.mark.integration

SYSTEM = "Answer from the documents only."
PLACES = ("harbour", "orchard", "foundry", "quarry")
TRADES = ("ferries", "cider", "castings", "gravel")


def document(name: str, trade: str) -> str:
    """A document of four paragraphs, each long enough to end a chunk (shared.chunking.LONG_PARAGRAPH)."""
    paragraphs = []
    for n in range(4):
        sentences = [
            f"The {name} company section {n + 1} describes how the {trade} business is run from day to day.",
            f"Every order for {trade} placed before noon on a weekday is confirmed by the {name} office within "
            f"{n + 2} hours, and the confirmation names the person who will handle it.",
            f"Prices for {trade} in section {n + 1} are reviewed each quarter and published on the {name} notice "
            f"board at least {n + 10} days before they apply to any new order.",
            f"Complaints about {trade} go to the {name} manager, who answers in writing within {n + 5} working days.",
        ]
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


DOCS = {place: document(place, trade) for place, trade in zip(PLACES, TRADES, strict=True)}


def messages(order: tuple[str, ...], question: str) -> list[dict[str, str]]:
    context = "\n\n".join(DOCS[name] for name in order)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"{context}\n\n{question}"}]


def ask(server: Server, order: tuple[str, ...], question: str, **reame: Any) -> dict[str, Any]:
    body = {"model": "m", "messages": messages(order, question), "temperature": 0, "max_tokens": 12,
            "reame": reame}
    status, _, reply = server.post_json("/v1/chat/completions", body)
    assert status == 200, reply
    return reply


def chunks(reply: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = reply["usage"]["reame"]["chunks"]
    return counts


def text(reply: dict[str, Any]) -> str:
    content: str = reply["choices"][0]["message"]["content"]
    return content


def prefills(server: Server) -> list[tuple[int, int, int]]:
    """Return the chunked prefills the workers logged, in order: (worker pid, chunks from the store, read alone)."""
    pattern = r"\[worker (\d+)\] .*chunked prefill of \d+ tokens: \d+ chunks in memory, (\d+) from the store, (\d+)"
    return [(int(pid), int(stored), int(read)) for pid, stored, read in re.findall(pattern, server.log())]


@pytest.fixture(scope="module")
def chunked(tmp_path_factory: pytest.TempPathFactory) -> Any:
    server = start_server(tmp_path_factory.mktemp("chunks"), workers=2, cache_chunks="true")
    yield server
    assert not server.stop()


def test_documents_in_another_order_and_company_are_placed_from_the_store(chunked: Server) -> None:
    first = ask(chunked, ("harbour", "orchard"), "How soon are cider orders confirmed?")
    counts = chunks(first)
    assert counts["read"] == 8 and counts["from_store"] == 0  # four chunks a document
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    wait_for_entries(chunked, 8)

    second = ask(chunked, ("orchard", "harbour"), "Who answers complaints about ferries?")
    counts = chunks(second)
    assert counts["read"] == 0 and counts["from_store"] + counts["in_memory"] == 8
    assert counts["link_tokens"] == 16 * 8  # in another order no chunk is in the prefix kept: each is placed
    usage = second["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > usage["prompt_tokens"] // 2

    third = ask(chunked, ("foundry", "harbour"), "When are casting prices published?")
    counts = chunks(third)
    assert counts["read"] == 4 and counts["from_store"] + counts["in_memory"] == 4  # the new document only


def test_a_worker_places_chunks_another_worker_read(chunked: Server) -> None:
    seen = len(prefills(chunked))
    entries = cache_stats(chunked)["entries"]
    ask(chunked, ("quarry",), "Who answers complaints about gravel?")  # a new document, read by one worker
    wait_for_entries(chunked, entries + 4)
    (reader,) = {pid for pid, _, read in prefills(chunked)[seen:] if read}
    # Two requests at once go to both workers (the quarry second, so that neither prompt starts
    # with what the reader holds: the dispatcher would wait for it); until the other has served one.
    orders = [("harbour", "quarry"), ("orchard", "quarry")]
    for attempt in range(6):
        question = f"Attempt {attempt}: who handles gravel orders?"
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(lambda order: ask(chunked, order, question), orders))  # noqa: B023
        assert all(chunks(reply)["read"] == 0 for reply in replies)
        if any(pid != reader and stored >= 4 for pid, stored, _ in prefills(chunked)[seen:]):
            return  # the quarry's chunks, read by the reader only, placed from the store by the other worker
    pytest.fail(f"the reader served every request: {prefills(chunked)[seen:]}")


def ask_parts(server: Server, docs: dict[str, str], order: tuple[str, ...], question: str) -> dict[str, Any]:
    """Ask with each document of ``order`` a text part of the user's content, then the question."""
    parts = [{"type": "text", "text": docs[name] + "\n\n"} for name in order] + [{"type": "text", "text": question}]
    body = {"model": "m", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": parts}],
            "temperature": 0, "max_tokens": 8}
    status, _, reply = server.post_json("/v1/chat/completions", body)
    assert status == 200, reply
    return reply


def test_documents_sent_as_content_parts_are_a_chunk_each(chunked: Server) -> None:
    entries = cache_stats(chunked)["entries"]
    first = ask_parts(chunked, DOCS, ("harbour", "foundry"), "Who answers complaints about castings?")
    assert chunks(first)["read"] == 2 and chunks(first)["link_tokens"] == 32  # a chunk a part, not a paragraph
    wait_for_entries(chunked, entries + 2)
    second = ask_parts(chunked, DOCS, ("foundry", "harbour"), "How soon are ferry orders confirmed?")
    assert chunks(second)["read"] == 0 and chunks(second)["from_store"] + chunks(second)["in_memory"] == 2
    usage = second["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0.8 * usage["prompt_tokens"]


def test_the_next_question_at_once_places_the_documents_it_shares_from_the_worker_s_memory(chunked: Server) -> None:
    """A retrieval pipeline asks again before the last reply's chunks reach the store: the worker
    that read them holds them in its memory, and the dispatcher sends the question there."""
    docs = {name: document(name, trade) for name, trade in (("bakery", "bread"), ("tannery", "leather"),
                                                            ("brewery", "ale"))}
    assert chunks(ask_parts(chunked, docs, ("bakery", "tannery"), "How soon are bread orders confirmed?"))["read"] == 2
    for order in [("tannery", "brewery"), ("brewery", "bakery")]:  # each shares a document with the one before
        counts = chunks(ask_parts(chunked, docs, order, "Who answers complaints about leather?"))
        assert counts["read"] <= 1 and counts["from_store"] == 0 and counts["in_memory"] >= 1, counts


def test_auto_counts_documents_whose_chunks_are_stored_as_read_in_any_order(chunked: Server) -> None:
    """auto answers a first question from query's excerpts while the documents are read in chunks
    behind it; asked about the same documents in another order, it sends them, placed from the store."""
    docs = {"mill": document("mill", "flour"), "dairy": document("dairy", "cheese")}  # read by no other test

    def ask_auto(order: tuple[str, ...], question: str) -> dict[str, Any]:
        content = "\n\n".join(docs[name] for name in order) + f"\n\n{question}"
        body = {"model": "m", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}],
                "temperature": 0, "max_tokens": 8, "reame": {"compress": "auto"}}
        status, _, reply = chunked.post_json("/v1/chat/completions", body)
        assert status == 200, reply
        return reply

    def warms_finished() -> int:
        ready = chunked.ready()
        assert ready is not None
        finished: int = ready["prefills"]["warms_finished"]
        return finished

    before, entries, seen = warms_finished(), cache_stats(chunked)["entries"], len(prefills(chunked))
    first = ask_auto(("mill", "dairy"), "How soon are flour orders confirmed?")
    assert first["usage"]["reame"]["compression"] == "query"
    wait_for(lambda: warms_finished() > before or None, what="the warm of the documents to finish")
    read = sum(r for _, _, r in prefills(chunked)[seen:])  # the warm's chunks and the excerpts'
    assert read >= 8
    wait_for_entries(chunked, entries + read)

    second = ask_auto(("dairy", "mill"), "Who answers complaints about cheese?")
    usage = second["usage"]
    assert usage["reame"]["compression"] == "auto"
    counts = chunks(second)
    # Four chunks a document from the store; only the excerpts and the question may be new.
    assert counts["from_store"] + counts["in_memory"] == 8 and counts["read"] <= 1
    assert usage["prompt_tokens_details"]["cached_tokens"] > usage["prompt_tokens"] // 2


def test_greedy_text_is_the_same_read_or_placed_and_after_a_restart(tmp_path: Path) -> None:
    question = "How many days before they apply are orchard prices published?"
    order = ("foundry", "orchard")
    first = start_server(tmp_path / "a", workers=1, cache_chunks="true")
    try:
        cold = ask(first, order, question)
        assert chunks(cold)["read"] == 8
        wait_for_entries(first, 8)
        ask(first, ("harbour",), "Anything?")  # the KV cache now holds another prompt
        warm = ask(first, order, question)
        assert chunks(warm)["read"] == 0 and chunks(warm)["in_memory"] == 8  # the worker's memory of chunks
        off = ask(first, order, question, chunks=False)
        assert "chunks" not in off["usage"]["reame"]
    finally:
        assert not first.stop()
    assert text(warm) == text(cold)

    again = start_server(tmp_path / "b", workers=1, cache_chunks="true", cache_dir=str(first.cache_dir))
    try:
        restarted = ask(again, order, question)
    finally:
        assert not again.stop()
    assert chunks(restarted)["from_store"] == 8 and chunks(restarted)["read"] == 0
    assert text(restarted) == text(cold)


def test_a_cache_that_cannot_move_positions_reads_chunked_requests_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        path = model_path(load(None, {}))
    except ModelFileError as err:
        pytest.skip(str(err))
    model = Model(path, 2048, 512, 1)
    try:
        monkeypatch.setattr(Model, "can_shift", property(lambda self: False))
        engine = Engine(model)
        out: list[Message] = []
        chat = [ChatMessage(m["role"], m["content"]) for m in messages(("harbour",), "Who answers complaints?")]
        request = Generate("r", SamplingParams(temperature=0.0, max_tokens=4), 1e12, messages=chat, chunks=True)
        engine.run(request, out.append, threading.Event())
    finally:
        model.close()
    done = out[-1]
    assert isinstance(done, Done)
    assert (done.chunks_read, done.chunks_from_store, done.link_tokens) == (0, 0, 0)
    assert engine.kv.spans == ()


def test_by_default_only_documents_sent_as_parts_are_read_in_chunks(server: Server) -> None:
    """cache.chunks = parts: the client marked its documents as parts; a joined text is reused from its start only."""
    question = "Who answers complaints about cider?"
    joined = ask(server, ("orchard", "quarry"), question)
    assert "chunks" not in joined["usage"]["reame"], joined["usage"]
    content = [{"type": "text", "text": DOCS[name] + "\n\n"} for name in ("quarry", "orchard")]
    user = {"role": "user", "content": [*content, {"type": "text", "text": question}]}
    body = {"model": "m", "temperature": 0, "max_tokens": 12, "messages": [{"role": "system", "content": SYSTEM}, user]}
    status, _, parted = server.post_json("/v1/chat/completions", body)
    assert status == 200, parted
    counts = chunks(parted)
    assert counts["read"] + counts["in_memory"] + counts["from_store"] == 2, counts  # a chunk a part
