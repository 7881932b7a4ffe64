"""Restore a prompt's prefix from the persistent KV cache, and save prompts to it.

The engine calls :meth:`PrefixCache.restore` before it prefills and
:meth:`PrefixCache.save` once the reply has been sent (or, for a warm request,
before Done). The rules live in worker.cache_policy, the token bookkeeping in
worker.kv, the wire in worker.cache_client; this module strings them together.
Nothing here raises to the engine because of the cache: every failure ends as
"computed without it". A request's cache scope is folded into the fingerprint its
entries are filed and looked up under (shared.prefix.scoped_fingerprint), so a
scope never finds another's entries.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from reame.shared.kv_entry import EntryHeader
from reame.shared.prefix import block_hashes, scoped_fingerprint
from reame.worker import cache_policy
from reame.worker.cache_client import Fetched
from reame.worker.kv import KvCache, common_prefix

log = logging.getLogger(__name__)


class CacheService(Protocol):
    """What the prefix cache needs from the cachekeeper client (tests pass a fake)."""

    @property
    def available(self) -> bool: ...

    def lookup(
        self, fingerprint: bytes, blocks: Sequence[bytes], wanted: Callable[[EntryHeader], bool] | None = None
    ) -> Fetched | None: ...

    def report_corrupt(self, key: str, reason: str) -> None: ...

    def save(
        self, tokens: Sequence[int], state: bytes | bytearray, done: Callable[[bool], None] | None = None,
        wait: float = 0.0, fingerprint: bytes | None = None,
    ) -> bool: ...

    def save_and_wait(
        self, tokens: Sequence[int], state: bytes | bytearray, fingerprint: bytes | None = None
    ) -> bool: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Restored:
    """The KV cache after a lookup: ``cached`` tokens need no computing, ``stored`` are in the store."""

    cached: int
    stored: int = 0


class PrefixCache:
    """The persistent KV cache as the engine sees it, for one model and KV layout."""

    def __init__(
        self, service: CacheService, fingerprint: bytes, kv_type: str, n_ctx: int, block_tokens: int,
        min_tokens: int,
    ) -> None:
        self.service = service
        self.fingerprint = fingerprint
        self._kv_type = kv_type
        self._n_ctx = n_ctx
        self._block_tokens = block_tokens
        self._min_tokens = min_tokens
        # Queued saves that the store did not take, as (stored before, tokens): the
        # uploader thread appends, the engine thread takes them (deque ops are atomic).
        self._lost: collections.deque[tuple[int, tuple[int, ...]]] = collections.deque()

    def restore(self, kv: KvCache, prompt: Sequence[int], local: int) -> Restored:
        """Bring the longest stored prefix of ``prompt`` into ``kv`` if it beats the ``local`` tokens.

        Only entries stored under the scope of ``kv`` (KvCache.enter_scope) are looked at.
        """
        self._forget_lost(kv)
        # Restoring replaces the whole state (tens of megabytes moved and decompressed):
        # worth it only for at least a block of tokens more than memory holds.
        min_gain = self._block_tokens
        if not self.service.available or not cache_policy.lookup_worthwhile(
            len(prompt), local, self._block_tokens, min_gain
        ):
            return Restored(local)
        fingerprint = scoped_fingerprint(self.fingerprint, kv.scope)
        blocks = block_hashes(fingerprint, prompt, self._block_tokens)
        lengths: dict[str, int] = {}  # what each entry the service looked at would restore

        def wanted(header: EntryHeader) -> bool:
            length = lengths[header.key()] = self._restore_length(header, fingerprint, prompt, local, min_gain)
            return length > 0

        fetched = self.service.lookup(fingerprint, blocks, wanted)
        if fetched is None:
            return Restored(local)
        header = fetched.header
        match = lengths.get(header.key(), 0)
        if match <= local:  # the service ignored ``wanted``: nothing to gain
            return Restored(local)
        started = time.perf_counter()
        if not kv.restore(fetched.state, header.tokens[:match]):
            # kv is empty now: llama.cpp may have written part of the state.
            self.service.report_corrupt(fetched.key, "llama.cpp refused to restore the state")
            return Restored(0)
        restore_ms = (time.perf_counter() - started) * 1e3
        log.info(
            "restored %d of %d prompt tokens from cache entry %s: wait %.1f ms, transfer %.1f ms, "
            "decode %.1f ms, restore %.1f ms",
            match, len(prompt), fetched.key, fetched.wait_ms, fetched.transfer_ms, fetched.decode_ms, restore_ms,
        )
        return Restored(match, common_prefix(header.tokens, prompt))

    def _restore_length(
        self, header: EntryHeader, fingerprint: bytes, prompt: Sequence[int], local: int, min_gain: int
    ) -> int:
        """Return how many prompt tokens to restore from the entry of ``header``; 0: not this entry."""
        problem = cache_policy.entry_problem(header, fingerprint, self._kv_type, self._n_ctx)
        if problem is not None:
            log.info("not restoring cache entry %s: %s", header.key(), problem)
            return 0
        return cache_policy.restore_length(header.tokens, prompt, local, min_gain)

    def save(self, kv: KvCache, prompt: Sequence[int], warm: bool, *, wait: bool | None = None) -> bool:
        """Store the state of ``prompt`` (at the head of ``kv``, and the reply after it) if worth it; True if stored.

        The entry is filed under the scope of ``kv``, where only that scope finds it.

        A warm request waits for the cachekeeper's answer (unless ``wait`` is False: a
        background warm must not keep a user request waiting); any other save is
        queued, the engine does not wait for it.
        """
        if not self.worth_saving(kv, prompt, warm):
            return False
        if kv.stored >= len(prompt):
            return True
        # The reply is stored with its prompt and stays in memory: a conversation's next
        # turn repeats it, and a later prompt that does not is served by the prompt's part.
        tokens = kv.tokens
        state = kv.save_state()
        fingerprint = scoped_fingerprint(self.fingerprint, kv.scope)
        if warm if wait is None else wait:
            stored = self.service.save_and_wait(tokens, state, fingerprint=fingerprint)
        else:
            # A queued save counts as stored, so the next request does not queue the same
            # state again; should the store not take it, the mark is taken back, else a
            # worker asked the same prompt over and over would never store it.
            before = kv.stored

            def done(ok: bool) -> None:
                if not ok:
                    self._lost.append((before, tokens))

            stored = self.service.save(tokens, state, done, fingerprint=fingerprint)
        if stored:
            kv.mark_stored(len(tokens))
        return stored

    def worth_saving(self, kv: KvCache, prompt: Sequence[int], warm: bool) -> bool:
        """Tell whether the state of ``prompt`` (at the head of ``kv``) is stored, or :meth:`save` would store it.

        Asked before a reply's Done, which says so (Done.cache_saved), the prompt being saved after it.
        """
        self._forget_lost(kv)
        n_prompt = len(prompt)
        if kv.stored >= n_prompt:
            return True
        return cache_policy.should_save(n_prompt, kv.stored, self._min_tokens, warm) \
            and self.service.available and kv.tokens[:n_prompt] == tuple(prompt)

    def _forget_lost(self, kv: KvCache) -> None:
        """Take back the stored mark of queued saves that failed, where ``kv`` still holds their tokens."""
        while self._lost:
            before, tokens = self._lost.popleft()
            if kv.stored == len(tokens) and kv.tokens[: len(tokens)] == tokens:
                kv.unmark_stored(before)
