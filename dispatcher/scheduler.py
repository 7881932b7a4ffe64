"""Decide who gets which request: the dispatcher's whole state, with no sockets in it.

Each event (a message from a worker, a message from a client, the passing of
time) is a method call that takes the current time and returns the sends it
causes as a list of :class:`Send`; the broker performs them, tests read them.

The rules, as in the ZeroMQ guide's load-balancing broker with paranoid-pirate
heartbeats:

- A worker is registered by Ready and starts idle. A Generate goes to the idle
  worker whose last prompt shares the most text with it (dispatcher.affinity:
  that worker reads only the rest), the longest idle among equals; with none
  idle it waits in a bounded FIFO queue (full: OVERLOADED at once); with no
  worker attached at all it fails with NO_WORKERS at once.
- Prefix affinity: when a busy worker holds (or is reading right now) at least
  MIN_SHARE_CHARS more of a request's text than any idle one, the request waits
  for that worker rather than have the document read a second time, but only
  for as long as reading that text again would take (AFFINITY_SLACK times the
  estimate from the prefill rate the dispatcher observes); then any idle worker
  takes it. So questions about one new document, arriving together or back to
  back, cause one prefill.
- Delta is forwarded to the request's client and marks the request started
  (its output can no longer be replayed). Done and Error are forwarded and free
  the worker, which takes the next queued request.
- A worker silent for ``liveness`` heartbeat intervals, or that sends
  Disconnect, is removed. Its request goes back to the front of the queue if
  nothing had been forwarded yet and it had not been dispatched
  ``MAX_DISPATCHES`` times; otherwise the client gets WORKER_LOST.
- A message from a worker the dispatcher does not know (it restarted) is
  answered with Disconnect, which makes the worker announce itself again.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import logging
from typing import Final, NamedTuple

from reame.dispatcher import affinity
from reame.shared import protocol as p

log = logging.getLogger(__name__)

# A request whose worker died before any output gets one more worker; a prompt
# that kills every worker it reaches must not go round the pool forever.
MAX_DISPATCHES: Final = 2
# Less shared text than this is read again sooner than it is worth waiting for.
MIN_SHARE_CHARS: Final = 1024
# A waiting request's holder may still be reading the document and then has to answer;
# waiting for it is worth up to this many times the reading it saves.
AFFINITY_SLACK: Final = 2.0
MAX_AFFINITY_WAIT_S: Final = 60.0
# Prefill speed, in characters a second, until one is observed: about 50 tokens/s, a 1.5B
# model on a slow core. Erring slow makes the first waits long rather than in vain.
DEFAULT_PREFILL_CHARS_PER_S: Final = 200.0
RATE_MIN_CHARS: Final = 2048  # a shorter prefill says more about latency than about speed
RATE_WEIGHT: Final = 0.3  # of a new observation in the running estimate


class Dest(enum.Enum):
    """Which socket a send goes out on."""

    CLIENT = "client"  # the frontend: gateways
    WORKER = "worker"  # the backend: workers


class Send(NamedTuple):
    dest: Dest
    identity: bytes
    message: p.Message


@dataclasses.dataclass
class _Worker:
    identity: bytes
    name: str  # for logs: "worker_id (pid N)"
    expiry: float
    request_id: str | None = None
    holds: affinity.Chain = ()  # the prompt whose KV state it holds, or is computing


@dataclasses.dataclass
class _Request:
    generate: p.Generate
    client: bytes
    worker: bytes | None = None  # None while queued
    started: bool = False  # a Delta reached the client
    cancelled: bool = False  # the client asked; the worker has been told
    dispatches: int = 0
    chain: affinity.Chain = ()
    prefer: bytes | None = None  # the busy worker it waits for while queued
    prefer_until: float = 0.0

    @property
    def request_id(self) -> str:
        return self.generate.request_id


def _error(client: bytes, request_id: str, code: p.ErrorCode, message: str) -> Send:
    return Send(Dest.CLIENT, client, p.Error(request_id=request_id, code=code, message=message))


class Scheduler:
    """Track workers, queued and running requests; turn each event into sends."""

    def __init__(
        self,
        queue_size: int,
        now: float,
        *,
        interval: float = p.HEARTBEAT_INTERVAL_S,
        liveness: int = p.HEARTBEAT_LIVENESS,
    ) -> None:
        self._queue_size = queue_size
        self._interval = interval
        self._ttl = interval * liveness
        self._workers: dict[bytes, _Worker] = {}
        self._idle: collections.OrderedDict[bytes, None] = collections.OrderedDict()  # oldest first
        self._requests: dict[str, _Request] = {}
        self._queue: collections.OrderedDict[str, None] = collections.OrderedDict()  # FIFO
        self._heartbeat_at = now + interval
        self._prefill_rate = DEFAULT_PREFILL_CHARS_PER_S  # characters a second, observed
        self._rate_observed = False
        self.affinity_hits = 0  # requests sent to a worker holding at least MIN_SHARE_CHARS of them
        self.affinity_waits = 0  # requests that waited for a busy worker holding their text

    @property
    def next_heartbeat_at(self) -> float:
        """The time the next round of heartbeats is due."""
        return self._heartbeat_at

    def status(self) -> p.Status:
        """Count workers and requests, as a StatusQuery reply."""
        return p.Status(
            workers=len(self._workers),
            idle_workers=len(self._idle),
            queued=len(self._queue),
            running=len(self._requests) - len(self._queue),
        )

    # -- events from workers -------------------------------------------------

    def worker_message(self, identity: bytes, message: p.Message, now: float) -> list[Send]:
        """Handle one message that arrived on the backend from ``identity``."""
        if isinstance(message, p.Ready):
            return self._on_ready(identity, message, now)
        worker = self._workers.get(identity)
        if worker is None:
            return self._on_unknown_worker(identity, message)
        worker.expiry = now + self._ttl
        if isinstance(message, p.Heartbeat):
            return []
        elif isinstance(message, p.Delta):
            return self._on_delta(worker, message)
        elif isinstance(message, (p.Done, p.Error)):
            return self._on_end(worker, message, now)
        elif isinstance(message, p.Disconnect):
            return self._remove_worker(worker, now, "disconnected")
        else:
            log.warning("dropped %s from worker %s: workers do not send it", type(message).__name__, worker.name)
            return []

    def _on_ready(self, identity: bytes, ready: p.Ready, now: float) -> list[Send]:
        sends: list[Send] = []
        known = self._workers.get(identity)
        if known is not None:
            # The same identity announcing itself again has restarted: whatever
            # it was running is gone.
            sends += self._remove_worker(known, now, "announced itself again")
        worker = _Worker(identity, f"{ready.worker_id} (pid {ready.pid})", now + self._ttl)
        self._workers[identity] = worker
        self._idle[identity] = None
        log.info(
            "worker %s attached (model %s, n_ctx %d); %d worker(s)",
            worker.name, ready.model, ready.n_ctx, len(self._workers),
        )
        return sends + self._dispatch_queued(now)

    def _on_unknown_worker(self, identity: bytes, message: p.Message) -> list[Send]:
        if isinstance(message, p.Disconnect):
            return []  # it is leaving anyway
        log.info("message from unknown worker %r: asking it to announce itself", identity)
        sends = []
        if isinstance(message, p.Delta):
            # Its request died with the previous dispatcher: stop the work first.
            sends.append(Send(Dest.WORKER, identity, p.Cancel(request_id=message.request_id)))
        sends.append(Send(Dest.WORKER, identity, p.Disconnect()))
        return sends

    def _on_delta(self, worker: _Worker, delta: p.Delta) -> list[Send]:
        request = self._requests.get(delta.request_id)
        if request is None or request.worker != worker.identity:
            log.debug("delta for unknown request %r from %s: cancelling it", delta.request_id, worker.name)
            return [Send(Dest.WORKER, worker.identity, p.Cancel(request_id=delta.request_id))]
        request.started = True
        return [Send(Dest.CLIENT, request.client, delta)]

    def _on_end(self, worker: _Worker, message: p.Done | p.Error, now: float) -> list[Send]:
        request = self._requests.get(message.request_id)
        if request is None or request.worker != worker.identity:
            log.debug("dropped end of unknown request %r from %s", message.request_id, worker.name)
            return []
        del self._requests[request.request_id]
        if isinstance(message, p.Error):
            worker.holds = ()  # it may have stopped anywhere in the prompt
        else:
            self._observe_prefill(request, message)
        worker.request_id = None
        self._idle[worker.identity] = None
        return [Send(Dest.CLIENT, request.client, message), *self._dispatch_queued(now)]

    # -- events from clients -------------------------------------------------

    def client_message(self, identity: bytes, message: p.Message, now: float) -> list[Send]:
        """Handle one message that arrived on the frontend from ``identity``."""
        if isinstance(message, p.Generate):
            return self._on_generate(identity, message, now)
        elif isinstance(message, p.Cancel):
            return self._on_cancel(identity, message)
        elif isinstance(message, p.StatusQuery):
            return [Send(Dest.CLIENT, identity, self.status())]
        elif isinstance(message, p.Heartbeat):
            return []  # clients need not send them; harmless if they do
        else:
            log.warning("dropped %s from client %r: clients do not send it", type(message).__name__, identity)
            return []

    def _on_generate(self, client: bytes, generate: p.Generate, now: float) -> list[Send]:
        request_id = generate.request_id
        if request_id in self._requests:
            return [_error(client, request_id, p.ErrorCode.INVALID_REQUEST,
                           f"request id {request_id!r} is already in use")]
        if not self._workers:
            return [_error(client, request_id, p.ErrorCode.NO_WORKERS,
                           "no worker is attached to the dispatcher")]
        if generate.deadline <= now:
            return [_error(client, request_id, p.ErrorCode.TIMEOUT,
                           "the request's deadline passed before it was dispatched")]
        request = _Request(generate, client, chain=affinity.chain(generate))
        room = len(self._queue) < self._queue_size
        if self._idle:
            worker = self._choose(request, now, can_wait=room)
            if worker is not None:
                self._requests[request_id] = request
                return [self._assign(request, worker, now)]
        elif not room:
            return [_error(client, request_id, p.ErrorCode.OVERLOADED,
                           f"all {len(self._workers)} worker(s) are busy and "
                           f"the queue ({self._queue_size}) is full")]
        else:
            self._choose(request, now, can_wait=True)  # only to note whom it waits for
        self._requests[request_id] = request
        self._queue[request_id] = None
        return []

    def _on_cancel(self, client: bytes, cancel: p.Cancel) -> list[Send]:
        request = self._requests.get(cancel.request_id)
        if request is None or request.client != client:
            log.debug("cancel for unknown request %r from client %r", cancel.request_id, client)
            return []
        if request.worker is None:
            del self._queue[request.request_id]
            del self._requests[request.request_id]
            return [_error(client, request.request_id, p.ErrorCode.CANCELLED, "cancelled while queued")]
        if request.cancelled:
            return []
        # The worker answers with Error CANCELLED (or Done, if it was finishing).
        request.cancelled = True
        return [Send(Dest.WORKER, request.worker, cancel)]

    # -- the passing of time -------------------------------------------------

    def tick(self, now: float) -> list[Send]:
        """Purge what has expired, then send heartbeats if they are due."""
        return self.purge_expired(now) + self.heartbeats(now)

    def purge_expired(self, now: float) -> list[Send]:
        """Remove silent workers, fail queued requests whose deadline passed, end waits that ran out."""
        sends: list[Send] = []
        for worker in [w for w in self._workers.values() if w.expiry <= now]:
            sends += self._remove_worker(worker, now, f"silent for {self._ttl:g} s")
        for request_id in [r for r in self._queue if self._requests[r].generate.deadline <= now]:
            del self._queue[request_id]
            request = self._requests.pop(request_id)
            sends.append(_error(request.client, request_id, p.ErrorCode.TIMEOUT,
                                "the request's deadline passed while it was queued"))
        if self._idle and any(self._requests[r].prefer is not None for r in self._queue):
            sends += self._dispatch_queued(now)
        return sends

    def heartbeats(self, now: float) -> list[Send]:
        """Heartbeat every worker and every client waiting on a request, once per interval."""
        # The second test survives the wall clock being set back.
        if self._heartbeat_at - self._interval <= now < self._heartbeat_at:
            return []
        self._heartbeat_at = now + self._interval
        beat = p.Heartbeat()
        clients = dict.fromkeys(r.client for r in self._requests.values())
        return [Send(Dest.WORKER, w, beat) for w in self._workers] + [
            Send(Dest.CLIENT, c, beat) for c in clients
        ]

    def shutdown(self) -> list[Send]:
        """Fail every queued and running request with SHUTTING_DOWN; forget everything."""
        sends = []
        for request in self._requests.values():
            if request.worker is not None:
                sends.append(Send(Dest.WORKER, request.worker, p.Cancel(request_id=request.request_id)))
            sends.append(_error(request.client, request.request_id, p.ErrorCode.SHUTTING_DOWN,
                                "the dispatcher is shutting down"))
        self._requests.clear()
        self._queue.clear()
        self._idle.clear()
        self._workers.clear()
        return sends

    # -- helpers -------------------------------------------------------------

    def _choose(self, request: _Request, now: float, can_wait: bool) -> bytes | None:
        """Return the idle worker that should take ``request`` now, or None to let it wait.

        Sets ``request.prefer`` to the busy worker worth waiting for, if any.
        """
        best_idle, idle_share = None, -1
        for identity in self._idle:  # oldest first: the longest idle wins a tie
            share = affinity.shared_chars(self._workers[identity].holds, request.chain)
            share = share if share >= MIN_SHARE_CHARS else 0  # a common preamble is no reason to prefer
            if share > idle_share:
                best_idle, idle_share = identity, share
        holder, gain = self._busy_holder(request, max(idle_share, 0))
        if holder is not None and can_wait:
            if request.prefer != holder:
                request.prefer = holder
                request.prefer_until = now + min(
                    MAX_AFFINITY_WAIT_S, AFFINITY_SLACK * gain / self._prefill_rate
                )
                self.affinity_waits += 1
            if now < min(request.prefer_until, request.generate.deadline):
                return None
        request.prefer = None
        return best_idle

    def _busy_holder(self, request: _Request, baseline: int) -> tuple[bytes | None, int]:
        """Return the busy worker holding the most of ``request`` beyond ``baseline`` chars, and how much more."""
        best, gain = None, MIN_SHARE_CHARS - 1
        for identity, worker in self._workers.items():
            if identity in self._idle:
                continue
            more = affinity.shared_chars(worker.holds, request.chain) - baseline
            if more > gain:
                best, gain = identity, more
        return best, gain if best is not None else 0

    def _assign(self, request: _Request, identity: bytes, now: float) -> Send:
        del self._idle[identity]
        worker = self._workers[identity]
        shared = affinity.shared_chars(worker.holds, request.chain)
        if shared >= MIN_SHARE_CHARS:
            self.affinity_hits += 1
        worker.request_id = request.request_id
        worker.holds = request.chain
        request.worker = identity
        request.dispatches += 1
        request.prefer = None
        return Send(Dest.WORKER, identity, request.generate)

    def _observe_prefill(self, request: _Request, done: p.Done) -> None:
        """Learn the prefill rate from a request whose worker read much of its text.

        The worker's own figures count what it read, not what it restored from the
        store or kept in memory, and leave out the time the request spent queued.
        """
        read = done.prompt_tokens - done.cached_tokens
        if not request.chain or done.prompt_tokens <= 0 or read <= 0 or done.prompt_ms <= 0:
            return
        fresh_chars = request.chain[-1].chars * read / done.prompt_tokens
        if fresh_chars < RATE_MIN_CHARS:
            return
        rate = fresh_chars / (done.prompt_ms / 1000)
        weight = RATE_WEIGHT if self._rate_observed else 1.0
        self._prefill_rate += weight * (rate - self._prefill_rate)
        self._rate_observed = True

    def _dispatch_queued(self, now: float) -> list[Send]:
        """Give idle workers queued requests: first those waiting for them, then in arrival order."""
        sends = []
        for request_id in list(self._queue):
            prefer = self._requests[request_id].prefer
            if prefer is not None and prefer in self._idle:
                sends += self._take(self._requests[request_id], prefer, now)
        for request_id in list(self._queue):
            if not self._idle:
                break
            request = self._requests[request_id]
            if request.generate.deadline > now and request.prefer not in self._workers:
                request.prefer = None
            worker = self._choose(request, now, can_wait=request.generate.deadline > now)
            if worker is not None or request.generate.deadline <= now:
                sends += self._take(request, worker, now)
        return sends

    def _take(self, request: _Request, worker: bytes | None, now: float) -> list[Send]:
        """Take ``request`` off the queue and give it to ``worker``, or fail it if its deadline passed."""
        request_id = request.request_id
        del self._queue[request_id]
        if request.generate.deadline <= now or worker is None:
            del self._requests[request_id]
            return [_error(request.client, request_id, p.ErrorCode.TIMEOUT,
                           "the request's deadline passed while it was queued")]
        return [self._assign(request, worker, now)]

    def _remove_worker(self, worker: _Worker, now: float, reason: str) -> list[Send]:
        del self._workers[worker.identity]
        self._idle.pop(worker.identity, None)
        log.info("worker %s lost (%s); %d worker(s) left", worker.name, reason, len(self._workers))
        if worker.request_id is None:
            return []
        request = self._requests[worker.request_id]
        request.worker = None
        if request.cancelled:
            del self._requests[request.request_id]
            return [_error(request.client, request.request_id, p.ErrorCode.CANCELLED,
                           "cancelled; its worker was lost")]
        if request.started or request.dispatches >= MAX_DISPATCHES:
            del self._requests[request.request_id]
            return [_error(request.client, request.request_id, p.ErrorCode.WORKER_LOST,
                           f"the worker serving this request was lost ({reason})")]
        log.info("request %s goes back to the front of the queue", request.request_id)
        self._queue[request.request_id] = None
        self._queue.move_to_end(request.request_id, last=False)
        return self._dispatch_queued(now)
