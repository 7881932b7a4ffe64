"""Prefix affinity: requests go where their document already is, and wait for it within reason."""

from __future__ import annotations

import msgspec
import pytest

from reame.dispatcher.placement import (
    AFFINITY_SLACK,
    DEFAULT_PREFILL_CHARS_PER_S,
    MAX_AFFINITY_WAIT_S,
    MIN_SHARE_CHARS,
)
from reame.dispatcher.scheduler import Scheduler
from reame.dispatcher.state import Dest, Send
from reame.shared import affinity
from reame.shared import protocol as p

T0 = 1000.0
GW = b"gw"
W1 = b"w-1"
W2 = b"w-2"
DOC = "".join(f"Paragraph {i}: the lighthouse keeper climbs {i} stairs every evening.\n\n" for i in range(80))
OTHER_DOC = DOC.replace("lighthouse", "windmill")


def ask(request_id: str, document: str, question: str) -> p.Generate:
    messages = [p.ChatMessage("system", document), p.ChatMessage("user", question)]
    return p.Generate(request_id=request_id, sampling=p.SamplingParams(), deadline=T0 + 10_000, messages=messages)


def done(request_id: str) -> p.Done:
    return p.Done(request_id=request_id, finish_reason=p.FinishReason.STOP, prompt_tokens=1, completion_tokens=1)


def sent_to(sends: list[Send]) -> dict[str, bytes]:
    """Map request id -> worker for every Generate sent."""
    return {s.message.request_id: s.identity for s in sends
            if s.dest is Dest.WORKER and isinstance(s.message, p.Generate)}


@pytest.fixture
def sched() -> Scheduler:
    scheduler = Scheduler(queue_size=8, now=T0, interval=1e6)  # no worker falls silent here
    for identity in (W1, W2):
        scheduler.worker_message(identity, p.Ready(worker_id=identity.decode(), pid=1, model="m", n_ctx=4096), T0)
    return scheduler


# -- naming prompts ----------------------------------------------------------------


def test_prompts_about_one_document_share_its_text() -> None:
    first, second = affinity.chain(ask("a", DOC, "Q1?")), affinity.chain(ask("b", DOC, "Q2?"))
    assert affinity.shared_chars(first, second) >= len(DOC)
    assert affinity.shared_chars(first, second) < first[-1].chars
    assert affinity.shared_chars(first, affinity.chain(ask("c", OTHER_DOC, "Q1?"))) < 100


def test_a_long_paragraph_shares_its_whole_pieces() -> None:
    text = "x" * (5 * affinity.PIECE_CHARS)
    one = affinity.chain(p.Generate("a", p.SamplingParams(), T0, prompt=text + " one"))
    two = affinity.chain(p.Generate("b", p.SamplingParams(), T0, prompt=text + " two"))
    assert affinity.shared_chars(one, two) >= 4 * affinity.PIECE_CHARS


def test_roles_are_part_of_the_name() -> None:
    system = p.Generate("a", p.SamplingParams(), T0, messages=[p.ChatMessage("system", DOC)])
    user = p.Generate("b", p.SamplingParams(), T0, messages=[p.ChatMessage("user", DOC)])
    assert affinity.shared_chars(affinity.chain(system), affinity.chain(user)) == 0
    assert affinity.shared_chars((), affinity.chain(user)) == 0



def test_a_prompt_of_millions_of_paragraphs_is_named_by_its_first_pieces_only() -> None:
    """Issue #12: 2,000,000 tiny paragraphs stalled the dispatcher's loop for 3.6 s (heartbeats starved)."""
    tiny = p.Generate("a", p.SamplingParams(), T0, prompt="a\n\n" * 2_000_000)
    empty = p.Generate("b", p.SamplingParams(), T0, messages=[p.ChatMessage("user", "")] * 200_000)
    for request in (tiny, empty):
        assert len(affinity.chain(request)) == affinity.MAX_LINKS
    shorter = p.Generate("c", p.SamplingParams(), T0, prompt="a\n\n" * affinity.MAX_LINKS + "b")
    assert affinity.shared_chars(affinity.chain(tiny), affinity.chain(shorter)) == affinity.chain(tiny)[-1].chars


# -- routing -----------------------------------------------------------------------


def test_a_second_question_goes_to_the_worker_that_read_the_document(sched: Scheduler) -> None:
    assert sent_to(sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)) == {"r1": W1}
    sched.worker_message(W1, done("r1"), T0 + 1)
    # W2 has been idle longer, but W1 holds the document.
    assert sent_to(sched.client_message(GW, ask("r2", DOC, "Q2?"), T0 + 1)) == {"r2": W1}


def test_another_document_goes_to_the_longest_idle_worker(sched: Scheduler) -> None:
    sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)
    sched.worker_message(W1, done("r1"), T0 + 1)
    assert sent_to(sched.client_message(GW, ask("r2", OTHER_DOC, "Q1?"), T0 + 1)) == {"r2": W2}


def test_questions_arriving_together_wait_for_the_one_reading_the_document(sched: Scheduler) -> None:
    assert sent_to(sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)) == {"r1": W1}
    # W2 is idle, but reading the document again would cost more than waiting for W1.
    assert sched.client_message(GW, ask("r2", DOC, "Q2?"), T0 + 0.1) == []
    assert sched.client_message(GW, ask("r3", DOC, "Q3?"), T0 + 0.2) == []
    assert sched.status().queued == 2 and sched.placement.counters.affinity_waits == 2
    assert sent_to(sched.worker_message(W1, done("r1"), T0 + 5)) == {"r2": W1}
    assert sent_to(sched.worker_message(W1, done("r2"), T0 + 5.5)) == {"r3": W1}


def test_a_wait_lasts_no_longer_than_reading_the_text_again(sched: Scheduler) -> None:
    sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)
    assert sched.client_message(GW, ask("r2", DOC, "Q2?"), T0) == []
    bound = AFFINITY_SLACK * len(DOC) / DEFAULT_PREFILL_CHARS_PER_S
    assert sent_to(sched.purge_expired(T0 + bound * 0.9)) == {}
    assert sent_to(sched.purge_expired(T0 + bound * 1.1)) == {"r2": W2}


def test_the_wait_follows_the_observed_prefill_speed(sched: Scheduler) -> None:
    sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)
    slow = len(DOC) / (DEFAULT_PREFILL_CHARS_PER_S / 10)  # a tenth of the assumed speed
    read = p.Done(request_id="r1", finish_reason=p.FinishReason.STOP, prompt_tokens=1000, completion_tokens=1,
                  prompt_ms=slow * 1000)
    sched.worker_message(W1, read, T0 + slow)
    sched.client_message(GW, ask("r2", OTHER_DOC, "Q1?"), T0 + slow)  # W2 reads the other document
    now = T0 + slow
    sched.client_message(GW, ask("r3", OTHER_DOC, "Q2?"), now)  # waits for W2
    default_bound = AFFINITY_SLACK * len(OTHER_DOC) / DEFAULT_PREFILL_CHARS_PER_S
    assert default_bound * 1.1 < MAX_AFFINITY_WAIT_S
    assert sent_to(sched.purge_expired(now + default_bound * 1.1)) == {}
    assert sent_to(sched.purge_expired(now + MAX_AFFINITY_WAIT_S + 1)) == {"r3": W1}


def test_a_restored_prompt_says_nothing_of_the_prefill_speed(sched: Scheduler) -> None:
    sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)
    restored = p.Done(request_id="r1", finish_reason=p.FinishReason.STOP, prompt_tokens=1000, completion_tokens=1,
                      cached_tokens=998, prompt_ms=1.0)
    sched.worker_message(W1, restored, T0 + 1)
    sched.client_message(GW, ask("r2", OTHER_DOC, "Q1?"), T0 + 1)
    assert sched.client_message(GW, ask("r3", OTHER_DOC, "Q2?"), T0 + 1) == []
    default_bound = AFFINITY_SLACK * len(OTHER_DOC) / DEFAULT_PREFILL_CHARS_PER_S
    assert sent_to(sched.purge_expired(T0 + 1 + default_bound * 0.9)) == {}


def test_little_shared_text_is_not_worth_waiting_for(sched: Scheduler) -> None:
    short = "A short preamble.\n\n"
    assert len(short) < MIN_SHARE_CHARS
    sched.client_message(GW, ask("r1", short, "Q1?"), T0)
    assert sent_to(sched.client_message(GW, ask("r2", short, "Q2?"), T0)) == {"r2": W2}


def test_a_worker_that_failed_holds_nothing(sched: Scheduler) -> None:
    sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)
    failed = p.Error(request_id="r1", code=p.ErrorCode.CANCELLED, message="cancelled")
    sched.worker_message(W1, failed, T0 + 1)
    sched.client_message(GW, ask("r2", OTHER_DOC, "Q1?"), T0 + 1)  # W2 busy with the other document
    sched.worker_message(W2, done("r2"), T0 + 2)
    # Neither holds DOC now: the longest idle worker takes it.
    assert sent_to(sched.client_message(GW, ask("r3", DOC, "Q2?"), T0 + 2)) == {"r3": W1}


def test_a_full_queue_sends_the_request_to_an_idle_worker_at_once() -> None:
    sched = Scheduler(queue_size=0, now=T0, interval=1e6)
    for identity in (W1, W2):
        sched.worker_message(identity, p.Ready(worker_id="w", pid=1, model="m", n_ctx=4096), T0)
    sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)
    assert sent_to(sched.client_message(GW, ask("r2", DOC, "Q2?"), T0)) == {"r2": W2}


def test_a_lost_holder_ends_the_wait(sched: Scheduler) -> None:
    sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)
    assert sched.client_message(GW, ask("r2", DOC, "Q2?"), T0) == []
    sends = sched.worker_message(W1, p.Disconnect(), T0 + 1)
    # r1 goes back to the queue and r2 waits no more: W2 takes one of them now.
    assert list(sent_to(sends).values()) == [W2]


def test_a_cache_scope_is_the_root_of_the_chain() -> None:
    def scoped(scope: str) -> affinity.Chain:
        return affinity.chain(msgspec.structs.replace(ask("a", DOC, "Q1?"), cache_scope=scope))

    assert scoped("") == affinity.chain(ask("a", DOC, "Q1?"))
    assert affinity.shared_chars(scoped("key-a"), scoped("key-a")) > len(DOC)
    assert affinity.shared_chars(scoped("key-a"), scoped("key-b")) == 0
    assert affinity.shared_chars(scoped("key-a"), scoped("")) == 0


def test_another_scope_is_not_steered_to_the_worker_holding_the_document(sched: Scheduler) -> None:
    def keyed(request_id: str, scope: str) -> p.Generate:
        return msgspec.structs.replace(ask(request_id, DOC, "Q1?"), cache_scope=scope)

    assert sent_to(sched.client_message(GW, keyed("r1", "key-a"), T0)) == {"r1": W1}
    # Key B's request neither waits for W1 nor is sent there: it goes to the longest-idle worker.
    assert sent_to(sched.client_message(GW, keyed("r2", "key-b"), T0 + 0.1)) == {"r2": W2}
    sched.worker_message(W2, done("r2"), T0 + 1)
    sched.worker_message(W1, done("r1"), T0 + 1.5)
    # W2 has been idle longer, but W1 holds key A's document.
    assert sent_to(sched.client_message(GW, keyed("r3", "key-a"), T0 + 2)) == {"r3": W1}


def test_no_slack_means_no_waiting() -> None:
    sched = Scheduler(queue_size=8, now=T0, interval=1e6, affinity_slack=0.0)
    for identity in (W1, W2):
        sched.worker_message(identity, p.Ready(worker_id="w", pid=1, model="m", n_ctx=4096), T0)
    sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)
    assert sent_to(sched.client_message(GW, ask("r2", DOC, "Q2?"), T0)) == {"r2": W2}
    assert sched.placement.counters.affinity_waits == 0


def test_a_larger_slack_waits_longer() -> None:
    sched = Scheduler(queue_size=8, now=T0, interval=1e6, affinity_slack=AFFINITY_SLACK * 2)
    for identity in (W1, W2):
        sched.worker_message(identity, p.Ready(worker_id="w", pid=1, model="m", n_ctx=4096), T0)
    sched.client_message(GW, ask("r1", DOC, "Q1?"), T0)
    assert sched.client_message(GW, ask("r2", DOC, "Q2?"), T0) == []
    bound = AFFINITY_SLACK * len(DOC) / DEFAULT_PREFILL_CHARS_PER_S
    assert sent_to(sched.purge_expired(T0 + min(bound * 1.5, MAX_AFFINITY_WAIT_S - 1))) == {}


def test_a_short_chat_goes_to_the_worker_holding_its_previous_turn(sched: Scheduler) -> None:
    first = [p.ChatMessage("user", "Hello, who are you?")]
    second = [*first, p.ChatMessage("assistant", "A helpful assistant."), p.ChatMessage("user", "Tell me more.")]
    assert sum(len(m.content) for m in second) < MIN_SHARE_CHARS
    sent = sched.client_message(GW, p.Generate("r1", p.SamplingParams(), T0 + 10_000, messages=first), T0)
    assert sent_to(sent) == {"r1": W1}
    sched.worker_message(W1, done("r1"), T0 + 1)
    # W2 has been idle longer, but W1 holds the turn before, and nothing else: it reads only the new turn.
    sent = sched.client_message(GW, p.Generate("r2", p.SamplingParams(), T0 + 10_000, messages=second), T0 + 1)
    assert sent_to(sent) == {"r2": W1}


def chat_parts(request_id: str, *documents: str) -> p.Generate:
    """A chat in chunk mode whose documents are text parts of one content."""
    content = "".join(documents) + "Question?"
    breaks = tuple(sum(len(d) for d in documents[:i]) for i in range(1, len(documents) + 1))
    messages = [p.ChatMessage("system", "Answer from the documents."), p.ChatMessage("user", content, breaks=breaks)]
    return p.Generate(request_id=request_id, sampling=p.SamplingParams(), deadline=T0 + 10_000, messages=messages,
                      chunks=True)


def test_documents_in_another_order_go_to_the_worker_holding_their_chunks(sched: Scheduler) -> None:
    a, b, c = DOC, OTHER_DOC, DOC.replace("lighthouse", "harbour")
    assert sent_to(sched.client_message(GW, chat_parts("r1", a, b), T0)) == {"r1": W1}
    sched.worker_message(W1, done("r1"), T0 + 1)
    # W2 has been idle longer and neither holds this prompt's start, but W1 holds B's chunk.
    assert sent_to(sched.client_message(GW, chat_parts("r2", b, c), T0 + 1)) == {"r2": W1}
    sched.worker_message(W1, done("r2"), T0 + 2)
    # Out of chunk mode the same texts are only a prefix that nobody holds: the longest idle worker.
    plain = msgspec.structs.replace(chat_parts("r3", c, a), chunks=False)
    assert sent_to(sched.client_message(GW, plain, T0 + 2)) == {"r3": W2}


def test_chunks_held_by_a_busy_worker_are_not_waited_for(sched: Scheduler) -> None:
    a, b = DOC, OTHER_DOC
    sched.client_message(GW, chat_parts("r1", a, b), T0)
    sched.worker_message(W1, done("r1"), T0 + 1)
    sched.client_message(GW, chat_parts("r2", a), T0 + 1)  # W1 again, busy now
    # Any worker places chunks from the store: W2 takes it at once.
    assert sent_to(sched.client_message(GW, chat_parts("r3", b, a), T0 + 1)) == {"r3": W2}


def test_a_chat_s_question_is_not_a_piece_but_a_warm_s_last_document_is() -> None:
    """As the worker reads them (worker.prompt_tokens.chat_chunks): the last client piece in context."""
    question = "Which of these stairs does the keeper climb first, and how often? " * 5
    assert len(question) >= affinity.MIN_CHUNK_CHARS

    def user(content: str, breaks: tuple[int, ...], warm: bool = False) -> p.Generate:
        return p.Generate("r", p.SamplingParams(), T0, messages=[p.ChatMessage("user", content, breaks=breaks)],
                          chunks=True, warm=warm)

    asked = user(DOC + OTHER_DOC + question, (len(DOC), len(DOC) + len(OTHER_DOC)))
    warm = user(DOC + OTHER_DOC, (len(DOC),), warm=True)
    assert [piece.chars for piece in affinity.chunk_pieces(asked)] == [len(DOC), len(OTHER_DOC)]
    assert affinity.chunk_pieces(warm) == affinity.chunk_pieces(asked)
