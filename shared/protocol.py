"""The wire protocol between reame's processes: every message, in one module.

Frames on every socket are ``[routing frames...] + [payload]``; the payload is a
msgpack array ``[PROTOCOL_VERSION, kind, {field: value}]``. Nothing else builds
frames: processes call :func:`encode` and :func:`decode` and handle the typed
classes below.

Who sends what::

    gateway  --Generate/Cancel/StatusQuery-->  dispatcher  --Generate/Cancel-->  worker
    gateway  <--Delta/Done/Error/Status/Heartbeat--  dispatcher  <--Delta/Done/Error--  worker
    worker   --Ready/Heartbeat/Disconnect-->  dispatcher  --Heartbeat-->  worker

    worker   --CacheLookup-->  cachekeeper  --CacheMiss | CacheHit + CacheChunk...-->  worker
    worker   --CachePut + CacheChunk...-->  cachekeeper  --CacheStored-->  worker
    worker   --CacheCorrupt-->  cachekeeper
    cli      --CacheAdmin-->  cachekeeper  --CacheReport-->  cli

Bad wire data becomes a :class:`ProtocolError` at the edge; the receiver logs it
and drops the message, it never crashes on it.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, ClassVar, Final, Union

import msgpack

PROTOCOL_VERSION: Final = 1

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


@dataclasses.dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str
    name: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class SamplingParams:
    """Sampling as the worker applies it; the gateway has already validated ranges.

    ``temperature == 0`` means greedy. ``max_tokens`` None means "until the context
    is full". ``logit_bias`` holds ``(token_id, bias)`` pairs.
    """

    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    seed: int | None = None
    max_tokens: int | None = None
    stop: list[str] = dataclasses.field(default_factory=list)
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    logit_bias: list[tuple[int, float]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True, slots=True)
class Ready:
    """A worker announces itself (again after every reconnect)."""

    KIND: ClassVar[Kind] = Kind.READY
    worker_id: str
    pid: int
    model: str
    n_ctx: int


@dataclasses.dataclass(frozen=True, slots=True)
class Heartbeat:
    KIND: ClassVar[Kind] = Kind.HEARTBEAT


@dataclasses.dataclass(frozen=True, slots=True)
class Disconnect:
    """A worker leaves on purpose (clean shutdown)."""

    KIND: ClassVar[Kind] = Kind.DISCONNECT


@dataclasses.dataclass(frozen=True, slots=True)
class Generate:
    """One completion: exactly one of ``prompt`` (raw text) or ``messages`` (chat).

    ``deadline`` is a Unix time; past it the request ends with ``TIMEOUT``.
    ``cache`` False keeps this request away from the persistent KV cache (no lookup,
    no save). ``warm`` asks only to read the prompt and store its KV state: no tokens
    are generated, and Done comes once the state is stored (or refused).
    ``speculative``: "off", "lookup" or "model" to override the worker's default.
    """

    KIND: ClassVar[Kind] = Kind.GENERATE
    request_id: str
    sampling: SamplingParams
    deadline: float
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    cache: bool = True
    warm: bool = False
    speculative: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Delta:
    """New output text; ``tokens`` is how many tokens produced it."""

    KIND: ClassVar[Kind] = Kind.DELTA
    request_id: str
    text: str
    tokens: int


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    KIND: ClassVar[Kind] = Kind.DONE
    request_id: str
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens whose KV state was reused, not computed
    prompt_ms: float = 0.0  # time spent reading the prompt
    generation_ms: float = 0.0  # time from the first to the last token
    cache_saved: bool = False  # for warm requests: the prompt's state is in the store
    draft_tokens: int = 0  # speculative tokens proposed
    accepted_draft_tokens: int = 0  # ...and accepted by the target model


@dataclasses.dataclass(frozen=True, slots=True)
class Error:
    KIND: ClassVar[Kind] = Kind.ERROR
    request_id: str
    code: ErrorCode
    message: str
    param: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Cancel:
    KIND: ClassVar[Kind] = Kind.CANCEL
    request_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class StatusQuery:
    KIND: ClassVar[Kind] = Kind.STATUS_QUERY


@dataclasses.dataclass(frozen=True, slots=True)
class Status:
    KIND: ClassVar[Kind] = Kind.STATUS
    workers: int
    idle_workers: int
    queued: int
    running: int


@dataclasses.dataclass(frozen=True, slots=True)
class CacheLookup:
    """Ask for the stored entry sharing the longest prefix with these block hashes.

    ``blocks`` is ``shared.prefix.block_hashes(fingerprint, prompt, block_tokens)``.
    """

    KIND: ClassVar[Kind] = Kind.CACHE_LOOKUP
    request_id: str
    fingerprint: str  # hex
    blocks: list[bytes]


@dataclasses.dataclass(frozen=True, slots=True)
class CacheMiss:
    """No entry shares a block with the lookup; sent after a CacheHit, it aborts that transfer."""

    KIND: ClassVar[Kind] = Kind.CACHE_MISS
    request_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class CacheHit:
    """An entry follows as CacheChunks; ``header`` is its encoded entry header.

    ``matched_tokens`` is how many leading tokens the block hashes vouch for; the
    worker may extend the match token by token with the header's token ids.
    """

    KIND: ClassVar[Kind] = Kind.CACHE_HIT
    request_id: str
    key: str
    header: bytes
    matched_tokens: int


@dataclasses.dataclass(frozen=True, slots=True)
class CacheChunk:
    """A piece of a state blob: compressed when read, raw when saved."""

    KIND: ClassVar[Kind] = Kind.CACHE_CHUNK
    request_id: str
    data: bytes
    last: bool


@dataclasses.dataclass(frozen=True, slots=True)
class CachePut:
    """Store the raw KV state of ``tokens``, sent next as CacheChunks of ``raw_len`` bytes."""

    KIND: ClassVar[Kind] = Kind.CACHE_PUT
    request_id: str
    fingerprint: str  # hex
    kv_type: str
    tokens: list[int]
    raw_len: int


@dataclasses.dataclass(frozen=True, slots=True)
class CacheStored:
    """The outcome of a CachePut: ``stored``, or the reason it was not."""

    KIND: ClassVar[Kind] = Kind.CACHE_STORED
    request_id: str
    stored: bool
    reason: str = ""


@dataclasses.dataclass(frozen=True, slots=True)
class CacheCorrupt:
    """A worker found an entry it was sent unusable: delete it."""

    KIND: ClassVar[Kind] = Kind.CACHE_CORRUPT
    key: str
    reason: str


class CacheCommand(enum.StrEnum):
    STATS = "stats"
    VERIFY = "verify"
    PURGE = "purge"


@dataclasses.dataclass(frozen=True, slots=True)
class CacheAdmin:
    KIND: ClassVar[Kind] = Kind.CACHE_ADMIN
    request_id: str
    command: CacheCommand


@dataclasses.dataclass(frozen=True, slots=True)
class CacheReport:
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
    removed: list[str] = dataclasses.field(default_factory=list)


Message = (
    Ready | Heartbeat | Disconnect | Generate | Delta | Done | Error | Cancel | StatusQuery | Status
    | CacheLookup | CacheMiss | CacheHit | CacheChunk | CachePut | CacheStored | CacheCorrupt
    | CacheAdmin | CacheReport
)

_CLASSES: Final[dict[Kind, type[Any]]] = {
    cls.KIND: cls for cls in typing.get_args(Message)
}


def encode(message: Message) -> bytes:
    """Return the payload frame for ``message``."""
    body = {f.name: _to_wire(getattr(message, f.name)) for f in dataclasses.fields(message)}
    packed: bytes = msgpack.packb([PROTOCOL_VERSION, int(message.KIND), body])
    return packed


def decode(payload: bytes) -> Message:
    """Parse and validate one payload frame; raise :class:`ProtocolError` if bad."""
    try:
        raw = msgpack.unpackb(payload, use_list=True, raw=False, strict_map_key=True)
    except Exception as err:  # msgpack raises several unrelated types
        raise ProtocolError(f"not msgpack: {err}") from err
    if not isinstance(raw, list) or len(raw) != 3:
        raise ProtocolError("payload is not a [version, kind, body] array")
    version, kind, body = raw
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version!r}, expected {PROTOCOL_VERSION}")
    try:
        cls = _CLASSES[Kind(kind)]
    except (ValueError, TypeError) as err:
        raise ProtocolError(f"unknown message kind {kind!r}") from err
    message: Message = _from_wire(cls, body, cls.__name__)
    return message


def _to_wire(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [_to_wire(v) for v in value]
    return value


_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _from_wire(tp: Any, value: Any, where: str) -> Any:
    """Check ``value`` against the annotation ``tp`` and build the typed value."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _from_wire(option, value, where)
            except ProtocolError as err:
                errors.append(str(err))
        raise ProtocolError("; ".join(errors))
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ProtocolError(f"{where}: expected a list, got {type(value).__name__}")
        return [_from_wire(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:
        items = typing.get_args(tp)
        if not isinstance(value, list) or len(value) != len(items):
            raise ProtocolError(f"{where}: expected a {len(items)}-item array")
        return tuple(_from_wire(t, v, f"{where}[{i}]") for i, (t, v) in enumerate(zip(items, value, strict=True)))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError as err:
            raise ProtocolError(f"{where}: {value!r} is not a {tp.__name__}") from err
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass_from_wire(tp, value, where)
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProtocolError(f"{where}: expected a number, got {type(value).__name__}")
        return float(value)
    if tp is bytes:
        if not isinstance(value, bytes):
            raise ProtocolError(f"{where}: expected bytes, got {type(value).__name__}")
        return value
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise ProtocolError(f"{where}: expected {tp.__name__}, got {type(value).__name__}")
        return value
    raise ProtocolError(f"{where}: no wire form for {tp!r}")


def _dataclass_from_wire(cls: type[Any], value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: expected a map, got {type(value).__name__}")
    hints = _hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(value) - names
    if unknown:
        raise ProtocolError(f"{where}: unknown fields {sorted(unknown)}")
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ProtocolError(f"{where}: missing field {f.name!r}")
            continue
        kwargs[f.name] = _from_wire(hints[f.name], value[f.name], f"{where}.{f.name}")
    return cls(**kwargs)
