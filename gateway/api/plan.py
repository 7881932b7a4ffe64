"""A request's set-up as a pure plan: what to send, what to warm behind it, its answer-cache key.

An endpoint turns its parsed body into an :class:`Ask`; :func:`draft` compresses it
in the mode it asks for and says what the plan waits on; :func:`plan` takes the
dispatcher's answer and gives the :class:`Plan`. Neither touches a socket, so every
choice a request's set-up makes is tested without one (tests/unit/test_gateway_plan.py).
The gateway's resources make at most two round trips between the two: a StatusQuery to
the dispatcher, only for ``auto`` (below), and the answer lookup at the cachekeeper, only
for an eligible request (gateway.upstream.answers), which cannot travel with the Generate: a hit
must never reach the dispatcher. The model's identity in the key comes from the same
Status where there is one.

``auto``'s first question is answered from ``query``'s short text while the document is
read in the background. ``auto`` sends the document in its cache-stable ``facts``
form, then the lines relevant to the question (gateway.compress.messages): once the
document's KV state is cached, a question reads only those lines. The first question
about a document would read all of it, so the gateway asks the dispatcher (one
StatusQuery with the document prefix's affinity links, shared.affinity) whether a
worker holds that prefix, is reading it for a user, or the store has it:

- read: the ``auto`` prompt is sent (``usage.reame.compression`` "auto");
- not read: the ``query`` prompt is sent instead, which holds only the relevant lines
  and is answered at once ("query"), and behind it, on the same socket, a background
  warm of the prefix (Generate.background): a worker reads it on idle cores, yielding
  to any user request at its next batch (dispatcher.background), and stores it, so
  the next question finds it read;
- not read, but a warm of it is queued or running (a question sent as soon as the
  previous answer came): the ``auto`` prompt, whose worker reads the document itself,
  resuming from what the warm stored, and stores it. Sending ``query`` again would
  pre-empt the warm at every question, and the document would never be read; the
  dispatcher drops the warm once the document is read;
- in chunk mode (Generate.chunks), read also when every piece of the documents was
  read in chunk mode, in whatever order and company (StatusQuery.chunks): the worker
  places them from the store. The warm is read in chunk mode too, so it stores pieces;
- no answer from the dispatcher: ``auto`` as is (the request would fail anyway).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Final

from reame.gateway.api.validation import DEFAULT_OPTIONS, Options
from reame.gateway.compress.compressor import Compressor
from reame.gateway.compress.messages import Result, compress_messages, compress_prompt
from reame.gateway.upstream.answers import answer_key, eligible
from reame.shared import affinity, protocol
from reame.shared.affinity import chunks_read, is_read
from reame.shared.modes import CompressMode
from reame.shared.protocol import ChatMessage, Generate, SamplingParams

# The dispatcher answers a StatusQuery within a millisecond; one that does not gets ``auto``.
PROBE_TIMEOUT_S: Final = 0.25
WARM_SUFFIX: Final = "-warm"


@dataclasses.dataclass(frozen=True, slots=True)
class Ask:
    """A completion request as an endpoint parsed it: the prompt or messages as the client sent them."""

    request_id: str
    sampling: SamplingParams
    deadline: float  # time.time() by which the reply must be complete
    scope: str  # the KV cache scope (gateway.http.auth.cache_scope)
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    options: Options = DEFAULT_OPTIONS
    warm: bool = False  # POST /v1/cache/warm: read and store, generate nothing
    chunks: bool = False  # read in chunk mode (cache.chunks, the request's "chunks")
    grammar: str | None = None
    logprobs: int | None = None
    tools: list[protocol.ToolFunction] | None = None


class Decision(enum.Enum):
    AUTO = "auto"  # read, or being read in the background: send auto's prompt
    QUERY_AND_WARM = "query and warm"  # not read: query's prompt now, the document in the background


@dataclasses.dataclass(frozen=True, slots=True)
class Draft:
    """An ask compressed in its mode, and, for ``auto``, the document prefix whose reading decides the rest."""

    ask: Ask
    compressed: Result
    mode: CompressMode
    reader: Generate | None = None  # auto: a background warm of the document prefix, sent if it is not read
    prefix: affinity.Chain = ()  # the reader's affinity chain, asked about (StatusQuery.prefix)
    pieces: tuple[bytes, ...] = ()  # in chunk mode, its pieces (StatusQuery.chunks)

    @property
    def asks_status(self) -> bool:
        """Tell whether the plan waits on the dispatcher's word (a StatusQuery) on the prefix."""
        return self.reader is not None

    @property
    def links(self) -> list[tuple[bytes, int]]:
        return [(link.digest, link.chars) for link in self.prefix]


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """What the gateway sends for one ask."""

    generate: Generate
    mode: str  # usage.reame.compression
    compressed: Result  # what was sent, for the savings counters
    warm: Generate | None = None  # sent behind ``generate`` on the same socket
    answer_key: str | None = None  # None: not looked up in the answer cache nor stored there


def compress(compressor: Compressor, ask: Ask, mode: CompressMode) -> Result:
    """Compress ``ask``'s prompt or messages in ``mode`` (deterministic: the same text for every question)."""
    policy = compressor.policy(mode)
    if ask.prompt is not None:
        return compress_prompt(ask.prompt, policy, warm=ask.warm)
    return compress_messages(ask.messages or [], policy, warm=ask.warm)


def draft(ask: Ask, compressor: Compressor) -> Draft:
    """Compress ``ask`` in its mode (none asked: the configured one); for ``auto``, name its document prefix."""
    mode = ask.options.compress or compressor.settings.mode
    result = compress(compressor, ask, mode)
    if mode != CompressMode.AUTO or ask.warm or (result.prefix_prompt is None and result.prefix_messages is None):
        return Draft(ask, result, mode)
    reader = Generate(
        ask.request_id + WARM_SUFFIX, SamplingParams(max_tokens=0), ask.deadline, prompt=result.prefix_prompt,
        messages=result.prefix_messages, cache=ask.options.cache, warm=True, cache_scope=ask.scope, background=True,
        chunks=ask.chunks,
    )
    pieces = affinity.chunk_digests(reader) if ask.chunks else ()
    return Draft(ask, result, mode, reader, affinity.chain(reader), pieces)


def decide(status: protocol.Status | None, prefix: affinity.Chain, chunks: tuple[bytes, ...] = ()) -> Decision:
    """Choose how to send a question whose auto prompt starts with ``prefix``, from the dispatcher's answer.

    ``chunks``: the prefix's pieces, when it is read in chunk mode.
    """
    if status is None or not prefix or is_read(status.prefix_chars, prefix[-1].chars) or status.prefix_warming:
        return Decision.AUTO
    if chunks_read(status.chunks_known, chunks):
        return Decision.AUTO
    return Decision.QUERY_AND_WARM


def plan(draft: Draft, status: protocol.Status | None, compressor: Compressor,
         identity: Callable[[protocol.Status | None], bytes | None] | None = None) -> Plan:
    """Return what to send for ``draft`` given the dispatcher's ``status`` (None: not asked, or silent).

    ``identity`` names the model for the answer key from a Status (gateway.upstream.answers.model_identity
    with the configuration; None: the answer cache is off).
    """
    ask, result, mode, warm = draft.ask, draft.compressed, str(draft.mode), None
    if draft.reader is not None and decide(status, draft.prefix, draft.pieces) is Decision.QUERY_AND_WARM:
        result, mode, warm = compress(compressor, ask, CompressMode.QUERY), CompressMode.QUERY.value, draft.reader
    generate = Generate(
        ask.request_id, ask.sampling, ask.deadline, prompt=result.prompt, messages=result.messages,
        cache=ask.options.cache, warm=ask.warm, speculative=ask.options.speculative, cache_scope=ask.scope,
        grammar=ask.grammar, logprobs=ask.logprobs, tools=ask.tools,
        # query's excerpts are chosen for this question: read alone and stored, no later prompt would find them.
        chunks=ask.chunks and mode != CompressMode.QUERY,
    )
    key = None
    if identity is not None and eligible(generate, ask.options.answer_cache):
        model = identity(status)
        key = None if model is None else answer_key(model, generate)
    return Plan(generate, mode, result, warm, key)
