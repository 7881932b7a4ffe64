"""The messages of a request's life (gateway, dispatcher, worker) and of the workers' liveness."""

from __future__ import annotations

import dataclasses
import enum
from typing import ClassVar, Final

import msgspec

from reame.shared.config import SamplingConfig, defaults
from reame.shared.modes import SpeculativeMode
from reame.shared.protocol.base import Kind, Struct


class ErrorCode(enum.StrEnum):
    """Why a request failed; the gateway maps each code to an HTTP status."""

    INVALID_REQUEST = "invalid_request"  # a parameter the worker cannot honour
    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
    OVERLOADED = "overloaded"  # the dispatcher's queue is full
    NO_WORKERS = "no_workers"  # no worker attached to the dispatcher
    WORKER_LOST = "worker_lost"  # the worker died after tokens had been sent
    TIMEOUT = "timeout"  # the request's deadline passed
    CANCELLED = "cancelled"
    SHUTTING_DOWN = "shutting_down"
    INTERNAL = "internal_error"


class FinishReason(enum.StrEnum):
    STOP = "stop"
    LENGTH = "length"


class ToolCall(Struct, frozen=True):
    """A call an assistant turn of the history made, for a template that writes calls itself."""

    name: str
    arguments: str  # the arguments' JSON text, as OpenAI clients send it
    id: str = ""


class ToolFunction(Struct, frozen=True):
    """A function offered to a chat template that lists tools itself (Generate.tools)."""

    name: str
    # Its JSON schema as JSON text: msgpack has no integers past 64 bits, a schema may (a bound).
    parameters: str
    description: str | None = None


# A dataclass, which msgspec decodes as strictly except that it ignores unknown fields:
# gateway.compress.messages rewrites contents with dataclasses.replace.
@dataclasses.dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str
    name: str | None = None
    # Only when the model's template renders tool calls (gateway.api.tool_calls); else they are plain text.
    tool_calls: tuple[ToolCall, ...] = ()  # an assistant turn's calls
    tool_call_id: str | None = None  # a tool turn: the call it answers
    # Where the content's text parts after the first begin (offsets in content, ascending):
    # a client that sends documents as parts of one message has them cut there in chunk mode.
    breaks: tuple[int, ...] = ()


# The configuration's [sampling] defaults are the only ones: a field left out takes them.
_SAMPLING: Final = defaults(SamplingConfig)


class SamplingParams(Struct, frozen=True):
    """Sampling as the worker applies it; the gateway has already validated ranges.

    ``temperature == 0`` means greedy. ``max_tokens`` None means "until the context
    is full". ``logit_bias`` holds ``(token_id, bias)`` pairs.
    """

    temperature: float = _SAMPLING.temperature
    top_p: float = _SAMPLING.top_p
    top_k: int = _SAMPLING.top_k
    min_p: float = _SAMPLING.min_p
    seed: int | None = None
    max_tokens: int | None = None
    stop: list[str] = msgspec.field(default_factory=list)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_penalty: float = _SAMPLING.repeat_penalty
    repeat_last_n: int = _SAMPLING.repeat_last_n
    logit_bias: list[tuple[int, float]] = msgspec.field(default_factory=list)


class Ready(Struct, frozen=True):
    """A worker announces itself (again after every reconnect).

    ``fingerprint`` names its model as its KV entries are filed under (worker.fingerprint:
    the file's content, the KV layout, the llama-cpp-python version), ``draft_fingerprint``
    its draft model's (b"" without one); the dispatcher reports both (WorkerState), so the
    gateway keys its answer cache by them without loading the model (gateway.upstream.answers).
    """

    KIND: ClassVar[Kind] = Kind.READY
    worker_id: str
    pid: int
    model: str
    n_ctx: int
    threads: int = 1  # its own share of the cores: workers.threads
    host: str = ""  # workers on one host lend each other their threads
    fingerprint: bytes = b""
    draft_fingerprint: bytes = b""


class Heartbeat(Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.HEARTBEAT


class Disconnect(Struct, frozen=True):
    """A worker leaves on purpose (clean shutdown)."""

    KIND: ClassVar[Kind] = Kind.DISCONNECT


class Generate(Struct, frozen=True):
    """One completion: exactly one of ``prompt`` (raw text) or ``messages`` (chat).

    ``deadline`` is a Unix time; past it the request ends with ``TIMEOUT``.
    ``cache`` False keeps this request away from the persistent KV cache (no lookup,
    no save). ``warm`` asks only to read the prompt and store its KV state: no tokens
    are generated, and Done comes once the state is stored (or refused).
    ``speculative`` overrides the worker's default mode. ``cache_scope`` ("" shared)
    keeps KV prefixes apart: a prefix read under one scope is reused, from memory
    or from the store, only by requests of the same scope (a hash, never a key).
    ``grammar`` constrains the reply (the gateway built it from a JSON schema and
    checked it); a grammar llama.cpp cannot parse ends the request with INVALID_REQUEST.
    ``background`` (a warm the gateway sends on its own, dispatcher.background) runs only
    on cores no user request needs, and stops at its next batch when one does.
    """

    KIND: ClassVar[Kind] = Kind.GENERATE
    request_id: str
    sampling: SamplingParams
    deadline: float
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    cache: bool = True
    warm: bool = False
    speculative: SpeculativeMode | None = None
    cache_scope: str = ""
    grammar: str | None = None  # GBNF (root rule "root") every reply must follow: response_format
    logprobs: int | None = None  # None: no logprobs; k: each token's and the k most likely tokens'
    background: bool = False
    tools: list[ToolFunction] | None = None  # offered through the chat template (it lists them itself)
    chunks: bool = False  # a chat's documents read in chunks reused wherever they sit (cache.chunks)


class TokenLogprob(Struct, frozen=True):
    """One generated token's log-probability under the model, and the ``top`` most likely tokens'."""

    piece: bytes  # the token's bytes (a piece may be part of a UTF-8 character)
    logprob: float
    top: list[tuple[bytes, float]] = msgspec.field(default_factory=list)


class Delta(Struct, frozen=True):
    """New output text; ``tokens`` is how many tokens produced it.

    ``logprobs`` has one entry per token when the request asked for them (Generate.logprobs).
    """

    KIND: ClassVar[Kind] = Kind.DELTA
    request_id: str
    text: str
    tokens: int
    logprobs: list[TokenLogprob] = msgspec.field(default_factory=list)


class Done(Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.DONE
    request_id: str
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens whose KV state was reused, not computed
    restored_tokens: int = 0  # of those, the ones restored from the store (the rest were in memory)
    prompt_ms: float = 0.0  # time spent reading the prompt
    generation_ms: float = 0.0  # time from the first to the last token
    # The prompt's state (in chunk mode: its chunks) is in the store, or on its way there:
    # a reply's is sent after this Done. The dispatcher learns what is stored from it.
    cache_saved: bool = False
    draft_tokens: int = 0  # speculative tokens proposed
    accepted_draft_tokens: int = 0  # ...and accepted by the target model
    queue_ms: float = 0.0  # set by the dispatcher: time from its arrival to its (last) worker
    answer_cache: str = ""  # set by the gateway (gateway.upstream.answers): "hit", "miss", or "" when not eligible
    # Chunk mode (Generate.chunks): chunks held in memory, placed from the store, read alone
    # (and stored), and the tokens read in context at their starts.
    chunks_in_memory: int = 0
    chunks_from_store: int = 0
    chunks_read: int = 0
    link_tokens: int = 0


class Error(Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.ERROR
    request_id: str
    code: ErrorCode
    message: str
    param: str | None = None


class Cancel(Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.CANCEL
    request_id: str


class StatusQuery(Struct, frozen=True):
    """Ask for the dispatcher's Status.

    ``prefix`` (shared.affinity links: digest, characters) also asks how much of
    that prompt prefix is known to be read (Status.prefix_chars, prefix_warming);
    ``chunks`` (shared.affinity.chunk_digests) how many of those pieces of a chat
    in chunk mode are (Status.chunks_known).
    """

    KIND: ClassVar[Kind] = Kind.STATUS_QUERY
    prefix: list[tuple[bytes, int]] = msgspec.field(default_factory=list)
    chunks: list[bytes] = msgspec.field(default_factory=list)


class WorkerState(Struct, frozen=True):
    """One worker as the dispatcher sees it (``reame status``)."""

    name: str  # "worker_id (pid N)"
    busy: bool
    served: int  # requests it finished since it attached
    held_chars: int = 0  # characters of the prompt whose KV state it holds
    held_prefix: str = ""  # a short hash naming that prompt ("" when it holds none)
    fingerprint: bytes = b""  # its model's and its draft model's, as it announced them (Ready)
    draft_fingerprint: bytes = b""


class Status(Struct, frozen=True):
    """The dispatcher's counts now, and its counters since it started."""

    KIND: ClassVar[Kind] = Kind.STATUS
    workers: int
    idle_workers: int
    queued: int
    running: int
    full_prefills: int = 0  # requests that read most of their prompt (reused less than half)
    reused_from_memory: int = 0  # requests that reused the prompt their worker held
    reused_from_store: int = 0  # requests that restored a stored prefix
    affinity_waits: int = 0  # requests that waited for the worker holding their document
    worker_states: list[WorkerState] = msgspec.field(default_factory=list)
    warms_started: int = 0  # background warms sent to a worker (again after each pre-emption)
    warms_finished: int = 0  # ...that read their whole prompt
    warms_preempted: int = 0  # ...that stopped for a user request, to resume later
    prefix_chars: int = 0  # of StatusQuery.prefix: characters a worker holds or the store has (not a warm's)
    prefix_warming: bool = False  # a background warm of that prefix is queued or running
    chunks_known: int = 0  # of StatusQuery.chunks: pieces read in chunk mode, so in the store


class Threads(Struct, frozen=True):
    """How many threads a worker may use from its next batch on: its own and idle neighbours'."""

    KIND: ClassVar[Kind] = Kind.THREADS
    threads: int
