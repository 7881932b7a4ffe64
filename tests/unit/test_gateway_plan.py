"""A request's plan: auto's first question gets query's prompt and a background warm until the document is read."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import falcon.testing
import pytest

from reame.gateway.api.plan import Ask, Decision, Plan, decide, draft, plan
from reame.gateway.api.validation import Options
from reame.gateway.app import create_app
from reame.gateway.compress.compressor import Compressor, Savings
from reame.gateway.compress.messages import Result, compress_messages, compress_prompt
from reame.gateway.compress.tokenizer import Tokenizer
from reame.gateway.upstream.answers import answer_key
from reame.gateway.upstream.client import Dispatcher
from reame.shared import affinity, config, protocol
from reame.shared.modes import CompressMode
from reame.shared.protocol import ChatMessage
from tests.unit.fakes import LIVENESS_S, FakeDispatcher
from tests.waiting import wait_for

SETTINGS = {"REAME_COMPRESS_MIN_TOKENS": "64", "REAME_MODEL_ALIAS": "m",
            "REAME_MODEL_PATH": "/nonexistent/reame-unit-tests.gguf"}
CONFIG = config.load(environ=SETTINGS)
FILLER = "We love our wonderful customers and our friendly team is simply the best in town!"
DOCUMENT = "\n\n".join([
    "## Deposits",
    "A security deposit of €200 is required for e-bikes. " + FILLER,
    "We cannot accept debit cards for deposits.",
    *(f"Our guided tour number {i} visits a lovely beach and a great café. {FILLER}" for i in range(30)),
])
QUESTION = "How much is the deposit for an e-bike?"
MESSAGES = [ChatMessage("system", DOCUMENT), ChatMessage("user", QUESTION)]
CHAIN = affinity.chain(protocol.Generate("w", protocol.SamplingParams(), 0.0, prompt=DOCUMENT))


def status(read: int = 0, warming: bool = False, chunks_known: int = 0) -> protocol.Status:
    return protocol.Status(workers=1, idle_workers=1, queued=0, running=0, prefix_chars=read, prefix_warming=warming,
                           chunks_known=chunks_known)


def test_the_decision() -> None:
    total = CHAIN[-1].chars
    assert decide(status(total), CHAIN) is Decision.AUTO
    assert decide(status(CHAIN[-2].chars), CHAIN) is Decision.QUERY_AND_WARM  # all but its last paragraph
    assert decide(status(0), CHAIN) is Decision.QUERY_AND_WARM
    assert decide(status(total // 2), CHAIN) is Decision.QUERY_AND_WARM
    assert decide(status(0, warming=True), CHAIN) is Decision.AUTO  # the question reads it itself
    assert decide(None, CHAIN) is Decision.AUTO  # a silent dispatcher: the request fails or waits anyway
    assert decide(status(0), ()) is Decision.AUTO


def test_in_chunk_mode_a_document_is_read_when_all_its_pieces_are() -> None:
    pieces = (b"a" * 8, b"b" * 8, b"c" * 8)
    assert decide(status(0, chunks_known=3), CHAIN, pieces) is Decision.AUTO  # read in another order or company
    assert decide(status(0, chunks_known=2), CHAIN, pieces) is Decision.QUERY_AND_WARM
    assert decide(status(0, chunks_known=0), CHAIN, ()) is Decision.QUERY_AND_WARM  # no piece long enough to tell


class FakeProbe:
    """The dispatcher's answer to a StatusQuery, and what it was asked."""

    def __init__(self, answer: protocol.Status | None) -> None:
        self.answer = answer
        self.asked: list[list[tuple[bytes, int]]] = []
        self.chunks: list[list[bytes]] = []

    def __call__(self, prefix: Sequence[tuple[bytes, int]], chunks: Sequence[bytes]) -> protocol.Status | None:
        self.asked.append(list(prefix))
        self.chunks.append(list(chunks))
        return self.answer


class Planner:
    """The gateway's set-up without its sockets: draft, ask the probe only when the draft says so, plan."""

    def __init__(self, probe: FakeProbe) -> None:
        self.compressor = Compressor(CONFIG, Tokenizer(None), Savings())
        self.probe = probe

    def plan(self, ask: Ask, identity: bytes | None = None) -> Plan:
        d = draft(ask, self.compressor)
        status = self.probe(d.links, d.pieces) if d.asks_status else None
        return plan(d, status, self.compressor, None if identity is None else lambda _status: identity)


def warming(answer: protocol.Status | None) -> tuple[Planner, FakeProbe]:
    probe = FakeProbe(answer)
    return Planner(probe), probe


def choose(w: Planner, mode: CompressMode | None = CompressMode.AUTO, warm: bool = False,
           messages: list[ChatMessage] | None = None, prompt: str | None = None,
           chunks: bool = False) -> tuple[Result, str, protocol.Generate | None]:
    ask = Ask("r1", protocol.SamplingParams(), 1234.0, "scope", prompt=prompt,
              messages=messages if prompt is None else None, options=Options(compress=mode), warm=warm, chunks=chunks)
    planned = w.plan(ask)
    return planned.compressed, planned.mode, planned.warm


def test_a_new_document_is_answered_from_query_and_warmed_in_the_background() -> None:
    w, probe = warming(status(0))
    compressed, mode, reader = choose(w, messages=MESSAGES)
    policy = w.compressor.policy
    assert mode == "query"
    assert compressed.messages == compress_messages(MESSAGES, policy(CompressMode.QUERY)).messages
    auto = compress_messages(MESSAGES, policy(CompressMode.AUTO))
    assert reader == protocol.Generate(
        "r1-warm", protocol.SamplingParams(max_tokens=0), 1234.0, messages=auto.prefix_messages,
        warm=True, cache_scope="scope", background=True,
    )
    # The dispatcher was asked about exactly the prompt the warm reads, under the request's scope.
    assert probe.asked == [[(link.digest, link.chars) for link in affinity.chain(reader)]]


def test_in_chunk_mode_the_dispatcher_is_asked_about_the_document_s_pieces_and_the_warm_reads_in_chunks() -> None:
    w, probe = warming(status(0))
    _, mode, reader = choose(w, messages=MESSAGES, chunks=True)
    assert mode == "query" and reader is not None and reader.chunks
    assert probe.chunks == [list(affinity.chunk_digests(reader))] and probe.chunks[0]
    w.probe = FakeProbe(status(0, chunks_known=len(probe.chunks[0])))
    assert choose(w, messages=MESSAGES, chunks=True)[1:] == ("auto", None)
    w.probe = probe
    choose(w, messages=MESSAGES)
    assert probe.chunks[-1] == []  # not in chunk mode: pieces are not asked about


def test_query_s_excerpts_are_never_read_in_chunk_mode() -> None:
    """They are chosen for one question: read alone and stored, no later prompt would find them."""
    w, _ = warming(status(0))
    ask = Ask("r1", protocol.SamplingParams(), 1234.0, "scope", messages=MESSAGES, chunks=True)
    planned = w.plan(ask)
    assert planned.mode == "query" and not planned.generate.chunks
    assert planned.warm is not None and planned.warm.chunks  # the documents behind it are
    w.probe = FakeProbe(status(0, chunks_known=len(affinity.chunk_digests(planned.warm))))
    assert w.plan(ask).mode == "auto" and w.plan(ask).generate.chunks
    explicit = Ask("r2", protocol.SamplingParams(), 1234.0, "scope", messages=MESSAGES, chunks=True,
                   options=Options(compress=CompressMode.QUERY))
    assert not w.plan(explicit).generate.chunks


def test_a_read_document_gets_the_auto_prompt_and_no_warm() -> None:
    w, _ = warming(None)
    prefix = compress_messages(MESSAGES, w.compressor.policy(CompressMode.AUTO)).prefix_messages
    reader = protocol.Generate("x", protocol.SamplingParams(), 0.0, messages=prefix, cache_scope="scope")
    w.probe = FakeProbe(status(affinity.chain(reader)[-1].chars))
    compressed, mode, sent = choose(w, messages=MESSAGES)
    assert (mode, sent) == ("auto", None)
    assert compressed.messages == compress_messages(MESSAGES, w.compressor.policy(CompressMode.AUTO)).messages


def test_while_a_warm_of_it_runs_the_next_question_reads_the_document_itself_and_no_second_warm() -> None:
    # Asked back to back, query's prompt would pre-empt the warm at every question.
    w, _ = warming(status(0, warming=True))
    compressed, mode, reader = choose(w, messages=MESSAGES)
    assert (mode, reader) == ("auto", None)
    assert compressed.messages == compress_messages(MESSAGES, w.compressor.policy(CompressMode.AUTO)).messages


def test_a_raw_prompt_warms_its_document_part() -> None:
    w, _ = warming(status(0))
    prompt = DOCUMENT + "\n\n" + QUESTION
    compressed, mode, reader = choose(w, prompt=prompt)
    assert mode == "query"
    assert compressed.prompt == compress_prompt(prompt, w.compressor.policy(CompressMode.QUERY)).prompt
    auto = compress_prompt(prompt, w.compressor.policy(CompressMode.AUTO))
    assert reader is not None and reader.prompt == auto.prefix_prompt and reader.messages is None


@pytest.mark.parametrize("mode", [CompressMode.LOSSLESS, CompressMode.FACTS, CompressMode.QUERY, CompressMode.OFF])
def test_other_modes_never_ask(mode: CompressMode) -> None:
    w, probe = warming(status(0))
    _, sent_mode, reader = choose(w, mode=mode, messages=MESSAGES)
    assert probe.asked == [] and reader is None and sent_mode == mode


def test_a_request_without_a_mode_gets_auto_the_default() -> None:
    assert CONFIG.compress.mode == CompressMode.AUTO
    w, probe = warming(status(0))
    _, sent_mode, reader = choose(w, mode=None, messages=MESSAGES)
    assert probe.asked and reader is not None and sent_mode == CompressMode.QUERY


def test_without_a_document_or_for_a_cache_warm_auto_never_asks() -> None:
    w, probe = warming(status(0))
    assert choose(w, messages=[ChatMessage("user", "Hello there")])[1:] == ("auto", None)
    assert choose(w, messages=MESSAGES, warm=True)[1:] == ("auto", None)  # /v1/cache/warm reads it itself
    assert probe.asked == []


def test_the_answer_key_names_what_is_sent_and_only_for_a_deterministic_request() -> None:
    w, _ = warming(status(0))
    greedy = Ask("r1", protocol.SamplingParams(temperature=0.0), 1234.0, "scope", messages=MESSAGES)
    planned = w.plan(greedy, identity=b"model")
    assert planned.mode == "query" and planned.answer_key == answer_key(b"model", planned.generate)
    w.probe = FakeProbe(status(0, warming=True))
    as_auto = w.plan(greedy, identity=b"model")
    assert as_auto.mode == "auto" and as_auto.answer_key not in (None, planned.answer_key)  # another prompt sent
    assert w.plan(greedy).answer_key is None  # the answer cache off, or the model not known yet
    sampled = dataclasses.replace(greedy, sampling=protocol.SamplingParams(temperature=0.7))
    assert w.plan(sampled, identity=b"model").answer_key is None
    opted_out = dataclasses.replace(greedy, options=Options(answer_cache=False))
    assert w.plan(opted_out, identity=b"model").answer_key is None


# ---- through the app, against the fake dispatcher ----------------------------------------


@pytest.fixture
def client(fake: FakeDispatcher) -> falcon.testing.TestClient:
    dispatcher = Dispatcher(fake.address, liveness_s=LIVENESS_S, context=fake.context)
    return falcon.testing.TestClient(create_app(CONFIG, dispatcher))


def ask(client: falcon.testing.TestClient) -> dict[str, object]:
    body = {"messages": [{"role": "system", "content": DOCUMENT}, {"role": "user", "content": QUESTION}],
            "reame": {"compress": "auto"}, "temperature": 0}
    result = client.simulate_post("/v1/chat/completions", json=body)
    assert result.status_code == 200, result.text
    usage: dict[str, object] = result.json["usage"]["reame"]
    return usage


def test_the_first_question_goes_as_query_with_the_warm_behind_it(
    client: falcon.testing.TestClient, fake: FakeDispatcher
) -> None:
    assert ask(client)["compression"] == "query"
    # In this order, on one socket; the warm may reach the dispatcher after the answer to the
    # question has come back. The warm's answer went to nobody.
    question, reader = wait_for(lambda: fake.generates() if len(fake.generates()) == 2 else None,
                                what="the question and the warm behind it")
    assert not question.background and question.messages != reader.messages
    assert reader.background and reader.warm and reader.request_id == question.request_id + "-warm"
    fake.prefix_read = True
    assert ask(client)["compression"] == "auto"
    assert len(fake.generates()) == 3 and not fake.generates()[-1].background
