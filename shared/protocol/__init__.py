"""The wire protocol between reame's processes: every message.

Frames on every socket are ``[routing frames...] + [payload]``; the payload is a
msgpack array ``[PROTOCOL_VERSION, kind, {field: value}]``. Nothing else builds
frames: processes call :func:`encode` and :func:`decode` and handle the typed
classes of :mod:`.chat` (a request's life) and :mod:`.cache` (the cachekeeper's),
all re-exported here; :mod:`.base` holds what they share.

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

import typing
from typing import Any, Final

import msgspec

from reame.shared.protocol.base import (
    HEARTBEAT_INTERVAL_S,
    HEARTBEAT_LIVENESS,
    PROTOCOL_VERSION,
    Kind,
    ProtocolError,
)
from reame.shared.protocol.cache import (
    AnswerFound,
    AnswerLookup,
    AnswerPut,
    CacheAdmin,
    CacheChunk,
    CacheCommand,
    CacheCorrupt,
    CacheHit,
    CacheLookup,
    CacheMiss,
    CachePut,
    CacheReport,
    CacheStored,
    SharedTierReport,
)
from reame.shared.protocol.chat import (
    Cancel,
    ChatMessage,
    Delta,
    Disconnect,
    Done,
    Error,
    ErrorCode,
    FinishReason,
    Generate,
    Heartbeat,
    Ready,
    SamplingParams,
    Status,
    StatusQuery,
    Threads,
    TokenLogprob,
    ToolCall,
    ToolFunction,
    WorkerState,
)

__all__ = [
    "HEARTBEAT_INTERVAL_S",
    "HEARTBEAT_LIVENESS",
    "PROTOCOL_VERSION",
    "AnswerFound",
    "AnswerLookup",
    "AnswerPut",
    "CacheAdmin",
    "CacheChunk",
    "CacheCommand",
    "CacheCorrupt",
    "CacheHit",
    "CacheLookup",
    "CacheMiss",
    "CachePut",
    "CacheReport",
    "CacheStored",
    "Cancel",
    "ChatMessage",
    "Delta",
    "Disconnect",
    "Done",
    "Error",
    "ErrorCode",
    "FinishReason",
    "Generate",
    "Heartbeat",
    "Kind",
    "Message",
    "ProtocolError",
    "Ready",
    "SamplingParams",
    "SharedTierReport",
    "Status",
    "StatusQuery",
    "Threads",
    "TokenLogprob",
    "ToolCall",
    "ToolFunction",
    "WorkerState",
    "decode",
    "encode",
]

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
