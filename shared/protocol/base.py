"""What every message shares: the version, the kinds, the error, the Struct base, liveness."""

from __future__ import annotations

import enum
from typing import Final

import msgspec

PROTOCOL_VERSION: Final = 6

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


class Struct(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The base of every message: immutable, and an unknown field is an error, not ignored."""
