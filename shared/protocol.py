"""The wire protocol between reame's processes: every message, in one module.

Frames on every socket are ``[routing frames...] + [payload]``; the payload is a
msgpack array ``[PROTOCOL_VERSION, kind, {field: value}]``. Nothing else builds
frames: processes call :func:`encode` and :func:`decode` and handle the typed
classes below.

Who sends what::

    gateway  --Generate/Cancel/StatusQuery-->  dispatcher  --Generate/Cancel-->  worker
    gateway  <--Delta/Done/Error/Status/Heartbeat--  dispatcher  <--Delta/Done/Error--  worker
    worker   --Ready/Heartbeat/Disconnect-->  dispatcher  --Heartbeat/Threads-->  worker

    worker   --CacheLookup-->  cachekeeper  --CacheMiss | CacheHit + CacheChunk...-->  worker
    worker   --CachePut + CacheChunk...-->  cachekeeper  --CacheStored-->  worker
    worker   --CacheCorrupt-->  cachekeeper
    cli      --CacheAdmin-->  cachekeeper  --CacheReport-->  cli
    gateway  --AnswerLookup | AnswerPut-->  cachekeeper  --CacheMiss | AnswerFound-->  gateway

Bad wire data becomes a :class:`ProtocolError` at the edge; the receiver logs it
and drops the message, it never crashes on it.

The messages are msgspec Structs: msgspec checks every field against its type while
it unpacks (a C decoder per kind), so no reflective Python validation runs per
message. With the field order and names of the dataclasses they replaced, the bytes
are the same msgpack as before.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any, ClassVar, Final

import msgspec

from reame.shared.config import SamplingConfig, defaults
from reame.shared.modes import SpeculativeMode

PROTOCOL_VERSION: Final = 2

# Liveness, as in the ZeroMQ guide's paranoid pirate: a peer that has been silent
# for HEARTBEAT_LIVENESS intervals is dead. Both sides send every interval.
HEARTBEAT_INTERVAL_S: Final = 1.0
HEARTBEAT_LIVENESS: Final = 3


class ProtocolError(ValueError):
    """A payload that is not a valid message of this protocol version."""


class Kind(enum.IntEnum):
    READY = 1
    HEARTBEAT = 2
    DISCONNECT = 3
    GENERATE = 4
    DELTA = 5
    DONE = 6
    ERROR = 7
    CANCEL = 8
    STATUS_QUERY = 9
    STATUS = 10
    CACHE_LOOKUP = 11
    CACHE_MISS = 12
    CACHE_HIT = 13
    CACHE_CHUNK = 14
    CACHE_PUT = 15
    CACHE_STORED = 16
    CACHE_CORRUPT = 17
    CACHE_ADMIN = 18
    CACHE_REPORT = 19
    THREADS = 20
    ANSWER_LOOKUP = 21
    ANSWER_FOUND = 22
    ANSWER_PUT = 23


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


class _Struct(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The base of every message: immutable, and an unknown field is an error, not ignored."""


# A dataclass, which msgspec decodes as strictly except that it ignores unknown fields:
# gateway.compress.messages rewrites contents with dataclasses.replace.
@dataclasses.dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str
    name: str | None = None


# The configuration's [sampling] defaults are the only ones: a field left out takes them.
_SAMPLING: Final = defaults(SamplingConfig)


class SamplingParams(_Struct, frozen=True):
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


class Ready(_Struct, frozen=True):
    """A worker announces itself (again after every reconnect)."""

    KIND: ClassVar[Kind] = Kind.READY
    worker_id: str
    pid: int
    model: str
    n_ctx: int
    threads: int = 1  # its own share of the cores: workers.threads
    host: str = ""  # workers on one host lend each other their threads


class Heartbeat(_Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.HEARTBEAT


class Disconnect(_Struct, frozen=True):
    """A worker leaves on purpose (clean shutdown)."""

    KIND: ClassVar[Kind] = Kind.DISCONNECT


class Generate(_Struct, frozen=True):
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


class TokenLogprob(_Struct, frozen=True):
    """One generated token's log-probability under the model, and the ``top`` most likely tokens'."""

    piece: bytes  # the token's bytes (a piece may be part of a UTF-8 character)
    logprob: float
    top: list[tuple[bytes, float]] = msgspec.field(default_factory=list)


class Delta(_Struct, frozen=True):
    """New output text; ``tokens`` is how many tokens produced it.

    ``logprobs`` has one entry per token when the request asked for them (Generate.logprobs).
    """

    KIND: ClassVar[Kind] = Kind.DELTA
    request_id: str
    text: str
    tokens: int
    logprobs: list[TokenLogprob] = msgspec.field(default_factory=list)


class Done(_Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.DONE
    request_id: str
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens whose KV state was reused, not computed
    restored_tokens: int = 0  # of those, the ones restored from the store (the rest were in memory)
    prompt_ms: float = 0.0  # time spent reading the prompt
    generation_ms: float = 0.0  # time from the first to the last token
    cache_saved: bool = False  # for warm requests: the prompt's state is in the store
    draft_tokens: int = 0  # speculative tokens proposed
    accepted_draft_tokens: int = 0  # ...and accepted by the target model
    queue_ms: float = 0.0  # set by the dispatcher: time from its arrival to its (last) worker
    answer_cache: str = ""  # set by the gateway (gateway.answers): "hit", "miss", or "" when not eligible


class Error(_Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.ERROR
    request_id: str
    code: ErrorCode
    message: str
    param: str | None = None


class Cancel(_Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.CANCEL
    request_id: str


class StatusQuery(_Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.STATUS_QUERY


class WorkerState(_Struct, frozen=True):
    """One worker as the dispatcher sees it (``reame status``)."""

    name: str  # "worker_id (pid N)"
    busy: bool
    served: int  # requests it finished since it attached
    held_chars: int = 0  # characters of the prompt whose KV state it holds
    held_prefix: str = ""  # a short hash naming that prompt ("" when it holds none)


class Status(_Struct, frozen=True):
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


class Threads(_Struct, frozen=True):
    """How many threads a worker may use from its next batch on: its own and idle neighbours'."""

    KIND: ClassVar[Kind] = Kind.THREADS
    threads: int


class CacheLookup(_Struct, frozen=True):
    """Ask for the stored entry sharing the longest prefix with these block hashes.

    ``blocks`` is ``shared.prefix.block_hashes(fingerprint, prompt, block_tokens)``.
    ``wait_ms`` is how long the asker will wait for a save under way that goes deeper
    than any stored entry (cachekeeper.pending); 0 answers at once.
    """

    KIND: ClassVar[Kind] = Kind.CACHE_LOOKUP
    request_id: str
    fingerprint: str  # hex
    blocks: list[bytes]
    wait_ms: int = 0


class CacheMiss(_Struct, frozen=True):
    """No entry shares a block with the lookup; sent after a CacheHit, it aborts that transfer."""

    KIND: ClassVar[Kind] = Kind.CACHE_MISS
    request_id: str


class CacheHit(_Struct, frozen=True):
    """An entry follows as CacheChunks; ``header`` is its encoded entry header.

    ``matched_tokens`` is how many leading tokens the block hashes vouch for; the
    worker may extend the match token by token with the header's token ids.
    """

    KIND: ClassVar[Kind] = Kind.CACHE_HIT
    request_id: str
    key: str
    header: bytes
    matched_tokens: int


class CacheChunk(_Struct, frozen=True):
    """A piece of a state blob: compressed when read, raw when saved."""

    KIND: ClassVar[Kind] = Kind.CACHE_CHUNK
    request_id: str
    data: bytes
    last: bool


class CachePut(_Struct, frozen=True):
    """Store the raw KV state of ``tokens``, sent next as CacheChunks of ``raw_len`` bytes."""

    KIND: ClassVar[Kind] = Kind.CACHE_PUT
    request_id: str
    fingerprint: str  # hex
    kv_type: str
    tokens: list[int]
    raw_len: int


class CacheStored(_Struct, frozen=True):
    """The outcome of a CachePut: ``stored``, or the reason it was not."""

    KIND: ClassVar[Kind] = Kind.CACHE_STORED
    request_id: str
    stored: bool
    reason: str = ""


class CacheCorrupt(_Struct, frozen=True):
    """A worker found an entry it was sent unusable: delete it."""

    KIND: ClassVar[Kind] = Kind.CACHE_CORRUPT
    key: str
    reason: str


class CacheCommand(enum.StrEnum):
    STATS = "stats"
    VERIFY = "verify"
    PURGE = "purge"


class CacheAdmin(_Struct, frozen=True):
    KIND: ClassVar[Kind] = Kind.CACHE_ADMIN
    request_id: str
    command: CacheCommand


class CacheReport(_Struct, frozen=True):
    """The store's counters after an admin command; ``removed`` lists deleted entry keys."""

    KIND: ClassVar[Kind] = Kind.CACHE_REPORT
    request_id: str
    entries: int
    bytes: int
    max_bytes: int
    hits: int
    misses: int
    evictions: int
    corrupt: int
    bytes_read: int
    bytes_written: int
    removed: list[str] = msgspec.field(default_factory=list)
    lookup_waits: int = 0  # lookups that waited for a save under way instead of missing
    save_seconds: float = 0.0  # spent compressing and writing stored entries
    restore_seconds: float = 0.0  # from a hit to the last chunk of its entry sent
    answer_entries: int = 0  # the answer cache (cachekeeper.answers): stored answers, their bytes, lookups
    answer_bytes: int = 0
    answer_hits: int = 0
    answer_misses: int = 0


class AnswerLookup(_Struct, frozen=True):
    """Ask for the stored answer under ``key`` (gateway.answers); CacheMiss or AnswerFound."""

    KIND: ClassVar[Kind] = Kind.ANSWER_LOOKUP
    request_id: str
    key: str


class AnswerFound(_Struct, frozen=True):
    """A stored answer: ``data`` is the msgpack list of the encoded Deltas and Done the worker sent."""

    KIND: ClassVar[Kind] = Kind.ANSWER_FOUND
    request_id: str
    data: bytes


class AnswerPut(_Struct, frozen=True):
    """Store an answer (the same ``data`` as AnswerFound); not acknowledged: nobody waits for it."""

    KIND: ClassVar[Kind] = Kind.ANSWER_PUT
    request_id: str
    key: str
    data: bytes


Message = (
    Ready | Heartbeat | Disconnect | Generate | Delta | Done | Error | Cancel | StatusQuery | Status
    | CacheLookup | CacheMiss | CacheHit | CacheChunk | CachePut | CacheStored | CacheCorrupt
    | CacheAdmin | CacheReport | Threads | AnswerLookup | AnswerFound | AnswerPut
)

_CLASSES: Final[dict[Kind, type[Any]]] = {
    cls.KIND: cls for cls in typing.get_args(Message)
}


_ENCODER: Final = msgspec.msgpack.Encoder()
# The envelope first; the body is decoded by its kind's own typed decoder.
_ENVELOPE: Final = msgspec.msgpack.Decoder(tuple[Any, Any, msgspec.Raw])
_DECODERS: Final[dict[Kind, msgspec.msgpack.Decoder[Any]]] = {
    kind: msgspec.msgpack.Decoder(cls) for kind, cls in _CLASSES.items()
}


def encode(message: Message) -> bytes:
    """Return the payload frame for ``message``."""
    return _ENCODER.encode((PROTOCOL_VERSION, message.KIND, message))


def decode(payload: bytes) -> Message:
    """Parse and validate one payload frame; raise :class:`ProtocolError` if bad."""
    try:
        version, kind, body = _ENVELOPE.decode(payload)
    except msgspec.ValidationError as err:
        raise ProtocolError(f"payload is not a [version, kind, body] array: {err}") from err
    except msgspec.DecodeError as err:
        raise ProtocolError(f"not msgpack: {err}") from err
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version!r}, expected {PROTOCOL_VERSION}")
    try:
        decoder = _DECODERS[Kind(kind)]
    except (ValueError, TypeError) as err:
        raise ProtocolError(f"unknown message kind {kind!r}") from err
    try:
        message: Message = decoder.decode(body)
    except msgspec.MsgspecError as err:
        raise ProtocolError(f"{_CLASSES[Kind(kind)].__name__}: {err}") from err
    return message
