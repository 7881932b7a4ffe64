"""Background warms in the scheduler: idle cores only, yielding to user requests, one per prompt."""

from __future__ import annotations

import msgspec

from reame.dispatcher.background import Known
from reame.dispatcher.scheduler import Scheduler
from reame.dispatcher.state import Dest, Send
from reame.shared import affinity
from reame.shared import protocol as p

T0 = 1000.0
GW = b"gw"
W1 = b"w-1"
W2 = b"w-2"
DOCUMENT = "\n\n".join(f"Paragraph {i} of the handbook says something worth reading." for i in range(80))
# As the gateway warms a document that a question follows in the same text: up to the blank line after it.
HEAD = DOCUMENT + "\n\n"
QUESTION = HEAD + "What does paragraph 3 say?"


def user(request_id: str, text: str = "hi", deadline: float = T0 + 600) -> p.Generate:
    return p.Generate(request_id=request_id, sampling=p.SamplingParams(), deadline=deadline, prompt=text)


def warm(request_id: str, text: str = DOCUMENT, scope: str = "", deadline: float = T0 + 600) -> p.Generate:
    return p.Generate(
        request_id=request_id, sampling=p.SamplingParams(max_tokens=0), deadline=deadline, prompt=text,
        warm=True, background=True, cache_scope=scope,
    )


def done(request_id: str, prompt_tokens: int = 1, saved: bool = False) -> p.Done:
    return p.Done(request_id=request_id, finish_reason=p.FinishReason.STOP, prompt_tokens=prompt_tokens,
                  completion_tokens=0, cache_saved=saved)


def cancelled(request_id: str) -> p.Error:
    return p.Error(request_id=request_id, code=p.ErrorCode.CANCELLED, message="the request was cancelled")


def to_worker(identity: bytes, message: p.Message) -> Send:
    return Send(Dest.WORKER, identity, message)


def to_client(message: p.Message) -> Send:
    return Send(Dest.CLIENT, GW, message)


def attached(*identities: bytes, lend: bool = False) -> Scheduler:
    sched = Scheduler(queue_size=4, now=T0, lend_threads=lend)
    for identity in identities:
        ready = p.Ready(worker_id=identity.decode(), pid=1, model="m", n_ctx=4096, threads=1, host="vm")
        sched.worker_message(identity, ready, T0)
    return sched


def generates(sends: list[Send]) -> list[tuple[bytes, str]]:
    return [(s.identity, s.message.request_id) for s in sends if isinstance(s.message, p.Generate)]


def refusals(sends: list[Send]) -> list[str]:
    return [s.message.request_id for s in sends
            if isinstance(s.message, p.Error) and s.message.code == p.ErrorCode.CANCELLED]


def prefix_of(generate: p.Generate) -> list[tuple[bytes, int]]:
    return [(link.digest, link.chars) for link in affinity.chain(generate)]


def test_a_warm_waits_for_an_idle_worker() -> None:
    sched = attached(W1)
    assert generates(sched.client_message(GW, user("q1"), T0)) == [(W1, "q1")]
    assert sched.client_message(GW, warm("b1"), T0) == []
    status = sched.status()
    assert (status.queued, status.running, status.warms_started) == (0, 1, 0)
    sends = sched.worker_message(W1, done("q1"), T0)
    assert sends[0].dest is Dest.CLIENT and generates(sends) == [(W1, "b1")]
    assert sched.status().warms_started == 1


def test_a_warm_never_starts_while_a_user_request_is_queued() -> None:
    sched = attached(W1)
    sched.client_message(GW, user("q1"), T0)
    sched.client_message(GW, warm("b1"), T0)
    sched.client_message(GW, user("q2"), T0)
    assert generates(sched.worker_message(W1, done("q1"), T0)) == [(W1, "q2")]
    assert generates(sched.worker_message(W1, done("q2"), T0)) == [(W1, "b1")]


def test_a_user_request_preempts_a_warm_which_resumes_when_the_worker_is_idle() -> None:
    sched = attached(W1)
    assert generates(sched.client_message(GW, warm("b1"), T0)) == [(W1, "b1")]
    # No worker is idle: the warm is told to stop at its next batch; the request waits for it.
    assert sched.client_message(GW, user("q1"), T0) == [to_worker(W1, p.Cancel(request_id="b1"))]
    assert sched.client_message(GW, user("q2"), T0) == []  # one warm stops once
    # The warm's end goes to nobody: it is queued again, behind the user requests.
    sends = sched.worker_message(W1, cancelled("b1"), T0)
    assert generates(sends) == [(W1, "q1")] and not [s for s in sends if s.dest is Dest.CLIENT]
    assert sched.status().warms_preempted == 1
    assert generates(sched.worker_message(W1, done("q1"), T0)) == [(W1, "q2")]
    assert generates(sched.worker_message(W1, done("q2"), T0)) == [(W1, "b1")]
    assert sched.worker_message(W1, done("b1", 900, saved=True), T0) == [to_client(done("b1", 900, saved=True))]
    status = sched.status(tuple(affinity.chain(warm("b1"))))
    assert (status.warms_started, status.warms_finished, status.warms_preempted) == (2, 1, 1)
    assert status.prefix_chars == len(DOCUMENT) + len("\x00prompt\x00") and not status.prefix_warming


def test_duplicate_warms_are_dropped() -> None:
    sched = attached(W1)
    sched.client_message(GW, user("q1"), T0)
    assert sched.client_message(GW, warm("b1"), T0) == []
    assert refusals(sched.client_message(GW, warm("b2"), T0)) == ["b2"]
    assert sched.client_message(GW, warm("b3", scope="other key"), T0) == []  # another scope is another prompt
    assert sched.client_message(GW, warm("b4", DOCUMENT + "\n\nMore."), T0) == []
    assert sched.status(tuple(affinity.chain(warm("b2")))).prefix_warming
    sched.worker_message(W1, done("q1"), T0)
    sched.worker_message(W1, done("b1", saved=True), T0)
    # Read and stored: a later warm of it is not worth a worker.
    assert refusals(sched.client_message(GW, warm("b5"), T0)) == ["b5"]


def test_a_failed_warm_may_be_sent_again() -> None:
    sched = attached(W1)
    sched.client_message(GW, warm("b1"), T0)
    error = p.Error(request_id="b1", code=p.ErrorCode.CONTEXT_LENGTH_EXCEEDED, message="long")
    assert sched.worker_message(W1, error, T0) == [to_client(error)]
    assert generates(sched.client_message(GW, warm("b2"), T0)) == [(W1, "b2")]


def test_with_lent_threads_a_warm_takes_a_host_no_user_request_runs_on() -> None:
    sched = attached(W1, W2, lend=True)
    sched.client_message(GW, user("q1"), T0)
    assert sched.client_message(GW, warm("b1"), T0) == []  # W2 is idle, but its thread is lent to W1
    assert generates(sched.worker_message(W1, done("q1"), T0)) == [(W2, "b1")]  # the longest idle
    # A user request on the other worker takes the lent thread back: the warm stops first.
    sends = sched.client_message(GW, user("q2"), T0)
    assert sends[0] == to_worker(W2, p.Cancel(request_id="b1"))
    assert generates(sends) == [(W1, "q2")]
    # Stopped, the warm waits until the host is free again.
    assert generates(sched.worker_message(W2, cancelled("b1"), T0)) == []
    assert generates(sched.worker_message(W1, done("q2"), T0)) == [(W2, "b1")]


def test_without_lent_threads_a_warm_runs_beside_a_user_request() -> None:
    sched = attached(W1, W2)
    sched.client_message(GW, user("q1"), T0)
    assert generates(sched.client_message(GW, warm("b1"), T0)) == [(W2, "b1")]
    assert generates(sched.client_message(GW, user("q2"), T0)) == []  # no worker idle
    assert sched.status().queued == 1


def test_a_request_waiting_for_the_worker_of_a_warm_stops_that_warm() -> None:
    sched = attached(W1, W2, lend=True)
    sched.client_message(GW, warm("b1", HEAD), T0)  # to W1, the longest idle
    # A question about the same document would rather wait for W1, which is reading it, than read it again.
    assert sched.client_message(GW, user("q1", QUESTION), T0) == [to_worker(W1, p.Cancel(request_id="b1"))]
    # The question reads the document on W1 (from what the warm read): the warm is dropped.
    sends = sched.worker_message(W1, cancelled("b1"), T0)
    assert generates(sends) == [(W1, "q1")] and refusals(sends) == ["b1"]
    assert generates(sched.worker_message(W1, done("q1", prompt_tokens=900), T0)) == []
    assert sched.status().warms_started == 1


def test_the_prefix_answer_counts_user_prompts_and_stored_ones_not_a_warm_in_progress() -> None:
    sched = attached(W1, W2)
    prefix = tuple(affinity.chain(warm("b1", HEAD)))
    sched.client_message(GW, warm("b1", HEAD), T0)
    status = sched.status(prefix)
    assert status.prefix_chars == 0 and status.prefix_warming
    sched.worker_message(W1, p.Disconnect(), T0)
    # A user request with the document reads it: it counts while being read (a question would wait for it).
    sched.client_message(GW, user("q1", QUESTION), T0)
    assert sched.status(prefix).prefix_chars == prefix[-1].chars
    assert refusals(sched.client_message(GW, warm("b2", HEAD), T0)) == ["b2"]
    sched.worker_message(W2, done("q1", prompt_tokens=900, saved=True), T0)  # its worker stores it after
    sched.worker_message(W2, p.Disconnect(), T0)
    assert sched.status(prefix).prefix_chars == prefix[-1].chars  # the store has it: no worker holds it now
    # Most of a prompt is not all of it: a warm of the document with more after it is still welcome.
    assert sched.status(tuple(affinity.chain(warm("b3", HEAD + "More.")))).prefix_chars == prefix[-1].chars


def test_known_prefixes_are_a_bounded_lru() -> None:
    known = Known(capacity=3)
    a, b = affinity.chain(user("a", "x" * 3000)), affinity.chain(user("b", "y" * 1500))
    known.add(a)  # 4 links: the prompt marker, then pieces of 1024, 1024 and 952 characters
    assert len(known) == 3 and known.chars(a) == a[-1].chars  # the shortest prefix was forgotten
    known.add(b)  # 3 links, the first shared with a
    assert known.chars(b) == b[-1].chars
    assert known.chars(a) == a[0].chars == b[0].chars


def test_a_queued_warm_past_its_deadline_is_dropped() -> None:
    sched = attached(W1)
    sched.client_message(GW, user("q1"), T0)
    sched.client_message(GW, warm("b1", deadline=T0 + 5), T0)
    sends = sched.purge_expired(T0 + 6)
    assert [(s.message.request_id, s.message.code) for s in sends if isinstance(s.message, p.Error)] == [
        ("b1", p.ErrorCode.TIMEOUT)
    ]
    assert generates(sched.worker_message(W1, done("q1"), T0 + 6)) == []


def test_a_warm_whose_worker_is_lost_is_forgotten() -> None:
    sched = attached(W1, W2)
    sched.client_message(GW, warm("b1"), T0)
    assert sched.worker_message(W1, p.Disconnect(), T0) == []
    assert generates(sched.client_message(GW, warm("b2"), T0)) == [(W2, "b2")]


def test_a_queued_warm_can_be_cancelled_by_its_client() -> None:
    sched = attached(W1)
    sched.client_message(GW, user("q1"), T0)
    sched.client_message(GW, warm("b1"), T0)
    assert refusals(sched.client_message(GW, p.Cancel(request_id="b1"), T0)) == ["b1"]
    assert generates(sched.worker_message(W1, done("q1"), T0)) == []
    assert not sched.status(tuple(affinity.chain(warm("b1")))).prefix_warming


# ---- chunk mode: a document is read when all its pieces are, wherever they sat ----------

LONG_A, LONG_B, LONG_C = (f"Document {name}: " + "a sentence worth its KV state. " * 12 for name in "ABC")


def chat(request_id: str, *documents: str, question: str = "What?", background: bool = False) -> p.Generate:
    content = "\n\n".join(documents) + f"\n\n{question}"  # a question follows them, as a retriever sends it
    return p.Generate(
        request_id=request_id, sampling=p.SamplingParams(max_tokens=0 if background else 8), deadline=T0 + 600,
        messages=[p.ChatMessage("system", "Answer from the documents."), p.ChatMessage("user", content)],
        warm=background, background=background, chunks=True,
    )


def chunk_done(request_id: str, read: int = 2) -> p.Done:
    return p.Done(request_id=request_id, finish_reason=p.FinishReason.STOP, prompt_tokens=500,
                  completion_tokens=0, chunks_read=read)


def pieces_known(sched: Scheduler, generate: p.Generate) -> tuple[int, int]:
    digests = affinity.chunk_digests(generate)
    return sched.status(chunks=digests).chunks_known, len(digests)


def test_the_pieces_of_a_chat_read_in_chunk_mode_are_known_in_any_order_and_company() -> None:
    sched = attached(W1)
    sched.client_message(GW, chat("q1", LONG_A, LONG_B, question="What does A say?"), T0)
    assert pieces_known(sched, chat("x", LONG_B, LONG_A)) == (0, 2)  # not before its worker is done
    sched.worker_message(W1, chunk_done("q1"), T0)
    assert pieces_known(sched, chat("x", LONG_B, LONG_A)) == (2, 2)
    assert pieces_known(sched, chat("x", LONG_B, LONG_C)) == (1, 2)
    other_scope = chat("x", LONG_B, LONG_A)
    assert sched.status(chunks=affinity.chunk_digests(p.Generate(
        request_id="x", sampling=other_scope.sampling, deadline=T0, messages=other_scope.messages,
        cache_scope="key-2", chunks=True))).chunks_known == 0  # another key's documents tell nothing


def test_pieces_are_known_only_from_a_chat_read_in_chunks_with_the_cache_on() -> None:
    sched = attached(W1)
    sched.client_message(GW, chat("q1", LONG_A, LONG_B), T0)
    # No chunk counted: read whole (a model whose cache cannot shift).
    sched.worker_message(W1, done("q1", prompt_tokens=500), T0)
    no_cache = msgspec.structs.replace(chat("q2", LONG_A, LONG_B), cache=False)
    sched.client_message(GW, no_cache, T0)
    sched.worker_message(W1, chunk_done("q2"), T0)
    assert pieces_known(sched, chat("x", LONG_A, LONG_B)) == (0, 2)


def test_a_warm_of_a_chat_whose_pieces_are_stored_is_refused() -> None:
    sched = attached(W1)
    sched.client_message(GW, chat("q1", LONG_A), T0)
    sched.worker_message(W1, chunk_done("q1", read=1), T0)
    sched.client_message(GW, chat("q2", LONG_B), T0)
    sched.worker_message(W1, chunk_done("q2", read=1), T0)
    assert refusals(sched.client_message(GW, chat("b1", LONG_B, LONG_A, background=True), T0)) == ["b1"]
    assert generates(sched.client_message(GW, chat("b2", LONG_B, LONG_C, background=True), T0)) == [(W1, "b2")]


def test_the_digests_follow_the_worker_s_cut() -> None:
    text = f"{LONG_A}\n\n{LONG_B}\n\nWhat?"
    parts = p.ChatMessage("user", text, breaks=(len(LONG_A) + 2, len(text) - 5))
    reply = p.ChatMessage("assistant", LONG_C)
    generate = p.Generate(request_id="x", sampling=p.SamplingParams(), deadline=T0,
                          messages=[p.ChatMessage("system", LONG_C), parts, reply], chunks=True)
    assert affinity.chunk_digests(generate)[1:] == affinity.chunk_digests(chat("y", LONG_A, LONG_B))  # a part each
    assert affinity.chunk_digests(user("z", LONG_A)) == ()  # a raw prompt is never read in chunks
    short = p.Generate(request_id="x", sampling=p.SamplingParams(), deadline=T0,
                       messages=[p.ChatMessage("user", "A short question?")], chunks=True)
    assert affinity.chunk_digests(short) == ()  # read in context anyway
