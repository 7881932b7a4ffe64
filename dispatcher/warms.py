"""The scheduler's rules for background warms (dispatcher.background), apart from those for user requests.

:class:`Warms` acts on the scheduler's :class:`dispatcher.state.Pool` (workers,
requests, the user queue) and gives a warm a worker through the scheduler's own
assignment; the scheduler calls its methods at its events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from reame.dispatcher.state import Dest, Pool, Request, Send, Worker, error, pieces
from reame.shared import affinity
from reame.shared import protocol as p
from reame.shared.affinity import chunks_read, is_read

log = logging.getLogger(__name__)


class Warms:
    """Queue, start, pre-empt and end background warms; say how much of a prompt is read."""

    def __init__(self, pool: Pool, assign: Callable[[Request, bytes, float], list[Send]]) -> None:
        self._pool = pool
        self._assign = assign  # the scheduler's: a request to an idle worker, with its thread share

    def read_chars(self, chain: affinity.Chain) -> int:
        """Return how much of ``chain`` a worker holds or is reading for a user, or the store has."""
        if not chain:
            return 0
        users = (w for w, worker in self._pool.workers.items() if not self._pool.warm_on(worker))
        return max(self._pool.placement.best(users, chain)[1], self._pool.background.known.chars(chain))

    def _chunks_stored(self, request: Request) -> bool:
        """Tell whether ``request`` is a chat in chunk mode whose every piece is known stored."""
        if not request.generate.chunks:
            return False
        digests = [piece.digest for piece in pieces(request)]
        return chunks_read(self._pool.background.known.chunks_known(digests), digests)

    def _learn_chunks(self, request: Request, done: p.Done | None) -> None:
        """Remember the pieces of a chat its worker read in chunk mode: it stores those it read after this Done."""
        if done is not None and request.generate.chunks and request.generate.cache \
                and done.chunks_in_memory + done.chunks_from_store + done.chunks_read:
            self._pool.background.known.add_chunks([piece.digest for piece in pieces(request)])

    def ended(self, request: Request, done: p.Done | None) -> bool:
        """Learn from a request's end; True if it is a warm that yielded and waits for idle cores again.

        Its prompt is remembered as stored when its worker says so (Done.cache_saved): a
        user request's is stored after its Done.
        """
        warms = self._pool.background
        self._learn_chunks(request, done)
        if done is not None and done.cache_saved:
            warms.known.add(request.chain)
        if not request.background:
            return False
        if done is None and request.preempted and not request.cancelled:
            warms.counters.preempted += 1
            request.worker, request.preempted = None, False
            self._pool.requests[request.request_id] = request
            warms.enqueue(request.request_id, request.chain, front=True)
            return True
        warms.forget(request.request_id, request.chain)
        if done is not None:
            warms.counters.finished += 1
        return False

    def on_warm(self, request: Request, now: float) -> list[Send]:
        """Queue a background warm unless it is a duplicate or already read; start it if cores are idle."""
        refusal = self._pool.background.refusal(request.chain, self.read_chars(request.chain)) \
            or ("this prompt's chunks are stored already" if self._chunks_stored(request) else None)
        if refusal is not None:
            log.debug("dropped background warm %s: %s", request.request_id, refusal)
            return [error(request.client, request.request_id, p.ErrorCode.CANCELLED, refusal)]
        self._pool.requests[request.request_id] = request
        self._pool.background.enqueue(request.request_id, request.chain)
        return self.dispatch(now)

    def dispatch(self, now: float) -> list[Send]:
        """Give queued warms idle workers whose cores no user request needs, while no user request waits."""
        sends: list[Send] = []
        for request_id in list(self._pool.background.queue):
            request = self._pool.requests[request_id]
            if request.generate.deadline <= now:
                del self._pool.requests[request_id]
                self._pool.background.forget(request_id, request.chain)
                sends.append(error(request.client, request_id, p.ErrorCode.TIMEOUT,
                                   "the warm's deadline passed while it waited for idle cores"))
                continue
            if self._pool.queue:
                continue  # only the deadlines are looked at
            if is_read(self.read_chars(request.chain), request.chain[-1].chars) \
                    or self._chunks_stored(request):  # by a user request meanwhile
                del self._pool.requests[request_id]
                self._pool.background.forget(request_id, request.chain)
                sends.append(error(request.client, request_id, p.ErrorCode.CANCELLED, "this prompt is read already"))
                continue
            free = [w for w in self._pool.idle if self._host_free(self._pool.workers[w].host)]
            if not free:
                continue
            worker, _ = self._pool.placement.best(free, request.chain, pieces(request))  # where most of it is read
            if worker is None:
                continue
            del self._pool.background.queue[request_id]
            self._pool.background.counters.started += 1
            sends += self._assign(request, worker, now)
        return sends

    def _host_free(self, host: str) -> bool:
        """Tell whether a warm may start on ``host``: no user request runs there, if threads are lent."""
        if not self._pool.lend:
            return True
        pool = self._pool
        users = (w for w in pool.workers.values() if w.request_id is not None and not pool.warm_on(w))
        return not any(w.host == host for w in users)

    def preempt(self) -> list[Send]:
        """Make warms yield to queued user requests: one each, at the warm's next batch.

        A queued request that waits for the worker a warm runs on (it holds the
        request's text) stops that warm; the others, when no worker is idle, stop any
        warm, counting those already told to stop.
        """
        running = [w for w in self._pool.workers.values() if self._pool.warm_on(w)]
        waited_for = {self._pool.requests[r].prefer for r in self._pool.queue}
        stopping = sum(self._stopping(w) for w in running if w.identity not in waited_for)
        sends = self._stop_warms(w for w in running if w.identity in waited_for)
        unserved = 0 if self._pool.idle else sum(self._pool.requests[r].prefer is None for r in self._pool.queue)
        going = [w for w in running if not self._stopping(w)]
        return sends + self._stop_warms(going[: max(0, unserved - stopping)])

    def _stopping(self, worker: Worker) -> bool:
        """Tell whether ``worker`` was told to stop its warm."""
        return worker.request_id is not None and self._pool.requests[worker.request_id].preempted

    def _stop_warms(self, workers: Iterable[Worker]) -> list[Send]:
        """Tell the workers among ``workers`` that run a warm to stop it at their next batch."""
        sends = []
        for worker in workers:
            request = self._pool.requests.get(worker.request_id) if worker.request_id is not None else None
            if request is not None and request.background and not request.preempted and not request.cancelled:
                request.preempted = True
                sends.append(Send(Dest.WORKER, worker.identity, p.Cancel(request_id=request.request_id)))
        return sends

    def yield_host(self, request: Request, host: str) -> list[Send]:
        """Stop the warms on ``host`` when a user request starts there: lent threads are not idle cores."""
        if request.background or not self._pool.lend:
            return []
        return self._stop_warms(w for w in self._pool.workers.values() if w.host == host)

    def lost(self, request: Request) -> list[Send]:
        """Forget a warm whose worker was lost: best effort, the next question about the document sends another."""
        del self._pool.requests[request.request_id]
        self._pool.background.forget(request.request_id, request.chain)
        return []
