"""What the scheduler knows of each worker and request, and what it sends: plain records."""

from __future__ import annotations

import collections
import dataclasses
import enum
from typing import NamedTuple

from reame.dispatcher.background import Background
from reame.dispatcher.placement import Placement
from reame.shared import affinity
from reame.shared import protocol as p


class Dest(enum.Enum):
    """Which socket a send goes out on."""

    CLIENT = "client"  # the frontend: gateways
    WORKER = "worker"  # the backend: workers


class Send(NamedTuple):
    dest: Dest
    identity: bytes
    message: p.Message


@dataclasses.dataclass
class Worker:
    identity: bytes
    name: str  # for logs: "worker_id (pid N)"
    expiry: float
    request_id: str | None = None
    threads: int = 1  # its own
    host: str = ""
    lent: int = 1  # the threads it was last told to use
    served: int = 0  # requests it finished
    fingerprint: bytes = b""  # its model's and its draft model's (Ready), reported in Status
    draft_fingerprint: bytes = b""


@dataclasses.dataclass
class Request:
    generate: p.Generate
    client: bytes
    worker: bytes | None = None  # None while queued
    started: bool = False  # a Delta reached the client
    cancelled: bool = False  # the client asked; the worker has been told
    preempted: bool = False  # a background warm told to yield to a user request
    dispatches: int = 0
    chain: affinity.Chain = ()
    pieces: tuple[affinity.Piece, ...] | None = None  # its chat's in chunk mode (affinity.chunk_pieces), once asked
    prefer: bytes | None = None  # the busy worker it waits for while queued
    prefer_until: float = 0.0
    arrived: float = 0.0  # when the dispatcher received it
    assigned_at: float = 0.0  # when it last went to a worker

    @property
    def request_id(self) -> str:
        return self.generate.request_id

    @property
    def background(self) -> bool:
        return self.generate.background


@dataclasses.dataclass
class Pool:
    """The workers and requests the scheduler and its warm rules (dispatcher.warms) both act on."""

    lend: bool  # idle workers lend their threads (workers.lend_threads)
    placement: Placement
    background: Background
    workers: dict[bytes, Worker] = dataclasses.field(default_factory=dict)
    # The idle workers, the longest idle first.
    idle: collections.OrderedDict[bytes, None] = dataclasses.field(default_factory=collections.OrderedDict)
    requests: dict[str, Request] = dataclasses.field(default_factory=dict)  # queued, running, and warms
    # The user requests waiting for a worker, first come first.
    queue: collections.OrderedDict[str, None] = dataclasses.field(default_factory=collections.OrderedDict)

    def warm_on(self, worker: Worker) -> bool:
        """Tell whether ``worker`` runs a background warm."""
        request = self.requests.get(worker.request_id) if worker.request_id is not None else None
        return request is not None and request.background


def pieces(request: Request) -> tuple[affinity.Piece, ...]:
    """Return ``request``'s pieces in chunk mode, else none (computed once: a request is looked at often)."""
    if request.pieces is None:
        request.pieces = affinity.chunk_pieces(request.generate) if request.generate.chunks else ()
    return request.pieces


def error(client: bytes, request_id: str, code: p.ErrorCode, message: str) -> Send:
    return Send(Dest.CLIENT, client, p.Error(request_id=request_id, code=code, message=message))
