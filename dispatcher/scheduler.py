"""Decide who gets which request: the dispatcher's whole state, with no sockets in it.

Each event (a message from a worker, a message from a client, the passing of
time) is a method call that takes the current time and returns the sends it
causes as a list of :class:`Send`; the broker performs them, tests read them.

The rules, as in the ZeroMQ guide's load-balancing broker with paranoid-pirate
heartbeats:

- A worker is registered by Ready and starts idle. A Generate goes to the idle
  worker whose last prompt shares the most text with it (that worker reads only
  the rest), the longest idle among equals; with none idle it waits in a
  bounded FIFO queue (full: OVERLOADED at once); with no worker attached at all
  it fails with NO_WORKERS at once.
- A request may wait, even with workers idle, for a busy worker that holds or
  is reading much more of its text, within a bound (dispatcher.placement), so
  questions about one new document, back to back or all at once, cause one
  prefill. A queued request that waits for a worker is given to it first.
- Busy workers borrow the threads of idle workers on their host
  (dispatcher.threads), when ``lend_threads`` is on.
- Delta is forwarded to the request's client and marks the request started
  (its output can no longer be replayed). Done and Error are forwarded and free
  the worker, which takes the next queued request.
- Background warms (Generate.background) take only cores no user request needs,
  and yield to one at their next batch (dispatcher.background).
- A worker silent for ``liveness`` heartbeat intervals, or that sends
  Disconnect, is removed. Its request goes back to the front of the queue if
  nothing had been forwarded yet and it had not been dispatched
  ``MAX_DISPATCHES`` times; otherwise the client gets WORKER_LOST.
- A message from a worker the dispatcher does not know (it restarted) is
  answered with Disconnect, which makes the worker announce itself again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

import msgspec

from reame.dispatcher import threads
from reame.dispatcher.background import Background
from reame.dispatcher.placement import AFFINITY_SLACK, MIN_SHARE_CHARS, Placement
from reame.dispatcher.state import Dest, Pool, Request, Send, Worker, error, pieces
from reame.dispatcher.warms import Warms
from reame.shared import affinity
from reame.shared import protocol as p

log = logging.getLogger(__name__)

# A request whose worker died before any output gets one more worker; a prompt
# that kills every worker it reaches must not go round the pool forever.
MAX_DISPATCHES: Final = 2


class Scheduler:
    """Track workers, queued and running requests; turn each event into sends."""

    def __init__(
        self,
        queue_size: int,
        now: float,
        *,
        interval: float = p.HEARTBEAT_INTERVAL_S,
        liveness: int = p.HEARTBEAT_LIVENESS,
        lend_threads: bool = False,
        affinity_slack: float = AFFINITY_SLACK,
    ) -> None:
        self._queue_size = queue_size
        self._interval = interval
        self._ttl = interval * liveness
        self._heartbeat_at = now + interval
        self._pool = Pool(lend_threads, Placement(affinity_slack), Background())
        self.placement = self._pool.placement
        self.background = self._pool.background
        self._warms = Warms(self._pool, self._assign)

    @property
    def next_heartbeat_at(self) -> float:
        """The time the next round of heartbeats is due."""
        return self._heartbeat_at

    def status(self, prefix: affinity.Chain = (), chunks: Sequence[bytes] = ()) -> p.Status:
        """Count workers and requests, as a StatusQuery reply; say how much of ``prefix`` and ``chunks`` is read."""
        warms = self.background.counters
        return p.Status(
            workers=len(self._pool.workers),
            idle_workers=len(self._pool.idle),
            queued=len(self._pool.queue),
            running=len(self._pool.requests) - len(self._pool.queue) - len(self.background.queue),
            full_prefills=self.placement.counters.full_prefills,
            reused_from_memory=self.placement.counters.reused_from_memory,
            reused_from_store=self.placement.counters.reused_from_store,
            affinity_waits=self.placement.counters.affinity_waits,
            worker_states=[
                p.WorkerState(w.name, w.request_id is not None, w.served, *self.placement.held(w.identity),
                              fingerprint=w.fingerprint, draft_fingerprint=w.draft_fingerprint)
                for w in self._pool.workers.values()
            ],
            warms_started=warms.started, warms_finished=warms.finished, warms_preempted=warms.preempted,
            prefix_chars=self._warms.read_chars(prefix),
            prefix_warming=self.background.warming(prefix),
            chunks_known=self.background.known.chunks_known(chunks),
        )

    # -- events from workers -------------------------------------------------

    def worker_message(self, identity: bytes, message: p.Message, now: float) -> list[Send]:
        """Handle one message that arrived on the backend from ``identity``."""
        if isinstance(message, p.Ready):
            return self._on_ready(identity, message, now)
        worker = self._pool.workers.get(identity)
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
        known = self._pool.workers.get(identity)
        if known is not None:
            # The same identity announcing itself again has restarted: whatever
            # it was running is gone.
            sends += self._remove_worker(known, now, "announced itself again")
        worker = Worker(identity, f"{ready.worker_id} (pid {ready.pid})", now + self._ttl,
                         threads=ready.threads, host=ready.host, lent=ready.threads,
                         fingerprint=ready.fingerprint, draft_fingerprint=ready.draft_fingerprint)
        self._pool.workers[identity] = worker
        self._pool.idle[identity] = None
        log.info(
            "worker %s attached (model %s, n_ctx %d); %d worker(s)",
            worker.name, ready.model, ready.n_ctx, len(self._pool.workers),
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

    def _on_delta(self, worker: Worker, delta: p.Delta) -> list[Send]:
        request = self._pool.requests.get(delta.request_id)
        if request is None or request.worker != worker.identity:
            log.debug("delta for unknown request %r from %s: cancelling it", delta.request_id, worker.name)
            return [Send(Dest.WORKER, worker.identity, p.Cancel(request_id=delta.request_id))]
        request.started = True
        return [Send(Dest.CLIENT, request.client, delta)]

    def _on_end(self, worker: Worker, message: p.Done | p.Error, now: float) -> list[Send]:
        request = self._pool.requests.get(message.request_id)
        if request is None or request.worker != worker.identity:
            log.debug("dropped end of unknown request %r from %s", message.request_id, worker.name)
            return []
        del self._pool.requests[request.request_id]
        done = message if isinstance(message, p.Done) else None
        self.placement.finished(worker.identity, request.chain, done, count=not request.background)
        worker.request_id = None
        worker.served += 1
        self._pool.idle[worker.identity] = None
        if done is not None and not request.background:
            # Only the dispatcher knows how long the request waited for a worker.
            message = msgspec.structs.replace(done, queue_ms=(request.assigned_at - request.arrived) * 1000)
        sends = [] if self._warms.ended(request, done) else [Send(Dest.CLIENT, request.client, message)]
        return [*sends, *self._dispatch_queued(now), *self._lend_threads()]

    # -- events from clients -------------------------------------------------

    def client_message(self, identity: bytes, message: p.Message, now: float) -> list[Send]:
        """Handle one message that arrived on the frontend from ``identity``."""
        if isinstance(message, p.Generate):
            return self._on_generate(identity, message, now)
        elif isinstance(message, p.Cancel):
            return self._on_cancel(identity, message)
        elif isinstance(message, p.StatusQuery):
            prefix = tuple(affinity.Link(digest, chars) for digest, chars in message.prefix)
            return [Send(Dest.CLIENT, identity, self.status(prefix, message.chunks[: affinity.MAX_LINKS]))]
        elif isinstance(message, p.Heartbeat):
            return []  # clients need not send them; harmless if they do
        else:
            log.warning("dropped %s from client %r: clients do not send it", type(message).__name__, identity)
            return []

    def _on_generate(self, client: bytes, generate: p.Generate, now: float) -> list[Send]:
        request_id = generate.request_id
        if request_id in self._pool.requests:
            return [error(client, request_id, p.ErrorCode.INVALID_REQUEST,
                           f"request id {request_id!r} is already in use")]
        if not self._pool.workers:
            return [error(client, request_id, p.ErrorCode.NO_WORKERS,
                           "no worker is attached to the dispatcher")]
        if generate.deadline <= now:
            return [error(client, request_id, p.ErrorCode.TIMEOUT,
                           "the request's deadline passed before it was dispatched")]
        request = Request(generate, client, chain=affinity.chain(generate), arrived=now)
        if generate.background:
            return self._warms.on_warm(request, now)
        room = len(self._pool.queue) < self._queue_size
        if self._pool.idle:
            worker = self._choose(request, now, can_wait=room)
            if worker is not None:
                self._pool.requests[request_id] = request
                return self._assign(request, worker, now)
        elif not room:
            return [error(client, request_id, p.ErrorCode.OVERLOADED,
                           f"all {len(self._pool.workers)} worker(s) are busy and "
                           f"the queue ({self._queue_size}) is full")]
        else:
            self._choose(request, now, can_wait=True)  # only to note whom it waits for
        self._pool.requests[request_id] = request
        self._pool.queue[request_id] = None
        return self._warms.preempt()

    def _on_cancel(self, client: bytes, cancel: p.Cancel) -> list[Send]:
        request = self._pool.requests.get(cancel.request_id)
        if request is None or request.client != client:
            log.debug("cancel for unknown request %r from client %r", cancel.request_id, client)
            return []
        if request.worker is None:
            self._pool.queue.pop(request.request_id, None)
            self.background.forget(request.request_id, request.chain)
            del self._pool.requests[request.request_id]
            return [error(client, request.request_id, p.ErrorCode.CANCELLED, "cancelled while queued")]
        if request.cancelled:
            return []
        # The worker answers with Error CANCELLED (or Done, if it was finishing).
        request.cancelled = True
        return [Send(Dest.WORKER, request.worker, cancel)]

    # -- the passing of time -------------------------------------------------

    def purge_expired(self, now: float) -> list[Send]:
        """Remove silent workers, fail queued requests whose deadline passed, end waits that ran out."""
        sends: list[Send] = []
        expired = [w for w in self._pool.workers.values() if w.expiry <= now]
        for worker in expired:
            # None of them may take a request that another one's removal puts back in the queue.
            self._pool.idle.pop(worker.identity, None)
        for worker in expired:
            sends += self._remove_worker(worker, now, f"silent for {self._ttl:g} s")
        for request_id in [r for r in self._pool.queue if self._pool.requests[r].generate.deadline <= now]:
            del self._pool.queue[request_id]
            request = self._pool.requests.pop(request_id)
            sends.append(error(request.client, request_id, p.ErrorCode.TIMEOUT,
                                "the request's deadline passed while it was queued"))
        if self._pool.idle and any(self._pool.requests[r].prefer is not None for r in self._pool.queue):
            sends += self._dispatch_queued(now)
        return sends + self._warms.dispatch(now)

    def heartbeats(self, now: float) -> list[Send]:
        """Heartbeat every worker and every client waiting on a request, once per interval."""
        # The second test survives the wall clock being set back.
        if self._heartbeat_at - self._interval <= now < self._heartbeat_at:
            return []
        self._heartbeat_at = now + self._interval
        beat = p.Heartbeat()
        clients = dict.fromkeys(r.client for r in self._pool.requests.values())
        return [Send(Dest.WORKER, w, beat) for w in self._pool.workers] + [
            Send(Dest.CLIENT, c, beat) for c in clients
        ]

    def shutdown(self) -> list[Send]:
        """Fail every queued and running request with SHUTTING_DOWN; forget everything."""
        sends = []
        for request in self._pool.requests.values():
            if request.worker is not None:
                sends.append(Send(Dest.WORKER, request.worker, p.Cancel(request_id=request.request_id)))
            sends.append(error(request.client, request.request_id, p.ErrorCode.SHUTTING_DOWN,
                                "the dispatcher is shutting down"))
        self._pool.requests.clear()
        self._pool.queue.clear()
        self.background.queue.clear()
        self._pool.idle.clear()
        self._pool.workers.clear()
        return sends

    # -- helpers -------------------------------------------------------------

    def _choose(self, request: Request, now: float, can_wait: bool) -> bytes | None:
        """Return the idle worker that should take ``request`` now, or None to let it wait.

        Sets ``request.prefer`` to the busy worker worth waiting for, if any.
        """
        placement = self.placement
        # Oldest first wins a tie; chunks held count only among idle workers: any worker can fetch them.
        best_idle, idle_share = placement.best(self._pool.idle, request.chain, pieces(request))
        busy = (w for w in self._pool.workers if w not in self._pool.idle)
        holder, held = placement.best(busy, request.chain)
        if holder is not None and held - idle_share >= MIN_SHARE_CHARS and can_wait and placement.may_wait:
            if request.prefer != holder:
                request.prefer = holder
                request.prefer_until = now + placement.wait_bound(held - idle_share)
                placement.counters.affinity_waits += 1
            if now < min(request.prefer_until, request.generate.deadline):
                return None
        request.prefer = None
        return best_idle

    def _assign(self, request: Request, identity: bytes, now: float) -> list[Send]:
        """Give ``request`` to the idle worker ``identity``; its thread share goes out first."""
        del self._pool.idle[identity]
        worker = self._pool.workers[identity]
        self.placement.assigned(identity, request.chain, pieces(request))
        worker.request_id = request.request_id
        request.worker = identity
        request.dispatches += 1
        request.prefer = None
        request.assigned_at = now
        stops = self._warms.yield_host(request, worker.host)
        return [*stops, *self._lend_threads(), Send(Dest.WORKER, identity, request.generate)]

    def _lend_threads(self) -> list[Send]:
        """Tell every busy worker whose share of its host's threads changed what it is now."""
        if not self._pool.lend:
            return []
        seats = (threads.Seat(w.identity, w.host, w.threads, w.request_id is not None)
                 for w in self._pool.workers.values())
        sends = []
        for identity, share in threads.allot(seats).items():
            worker = self._pool.workers[identity]
            if worker.lent != share:
                worker.lent = share
                sends.append(Send(Dest.WORKER, identity, p.Threads(threads=share)))
        return sends

    def _dispatch_queued(self, now: float) -> list[Send]:
        """Give idle workers queued requests: first those waiting for them, then in arrival order."""
        sends = []
        for request_id in list(self._pool.queue):
            prefer = self._pool.requests[request_id].prefer
            if prefer is not None and prefer in self._pool.idle:
                sends += self._take(self._pool.requests[request_id], prefer, now)
        for request_id in list(self._pool.queue):
            if not self._pool.idle:
                break
            request = self._pool.requests[request_id]
            if request.generate.deadline > now and request.prefer not in self._pool.workers:
                request.prefer = None
            worker = self._choose(request, now, can_wait=request.generate.deadline > now)
            if worker is not None or request.generate.deadline <= now:
                sends += self._take(request, worker, now)
        return sends + self._warms.preempt() + self._warms.dispatch(now)

    def _take(self, request: Request, worker: bytes | None, now: float) -> list[Send]:
        """Take ``request`` off the queue and give it to ``worker``, or fail it if its deadline passed."""
        request_id = request.request_id
        del self._pool.queue[request_id]
        if request.generate.deadline <= now or worker is None:
            del self._pool.requests[request_id]
            return [error(request.client, request_id, p.ErrorCode.TIMEOUT,
                           "the request's deadline passed while it was queued")]
        return self._assign(request, worker, now)

    def _remove_worker(self, worker: Worker, now: float, reason: str) -> list[Send]:
        return [*self._drop_worker(worker, now, reason), *self._lend_threads()]

    def _drop_worker(self, worker: Worker, now: float, reason: str) -> list[Send]:
        del self._pool.workers[worker.identity]
        self.placement.forget(worker.identity)
        self._pool.idle.pop(worker.identity, None)
        log.info("worker %s lost (%s); %d worker(s) left", worker.name, reason, len(self._pool.workers))
        if worker.request_id is None:
            return []
        request = self._pool.requests[worker.request_id]
        request.worker = None
        if request.background:
            return self._warms.lost(request)
        if request.cancelled:
            del self._pool.requests[request.request_id]
            return [error(request.client, request.request_id, p.ErrorCode.CANCELLED,
                           "cancelled; its worker was lost")]
        if request.started or request.dispatches >= MAX_DISPATCHES:
            del self._pool.requests[request.request_id]
            return [error(request.client, request.request_id, p.ErrorCode.WORKER_LOST,
                           f"the worker serving this request was lost ({reason})")]
        log.info("request %s goes back to the front of the queue", request.request_id)
        self._pool.queue[request.request_id] = None
        self._pool.queue.move_to_end(request.request_id, last=False)
        return self._dispatch_queued(now)
