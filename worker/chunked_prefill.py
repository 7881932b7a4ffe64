"""Bring the KV cache to a prompt read in chunks (worker.chunk_plan): memory, store, or read alone.

Every chunk the cache does not hold already is looked up in the store; those not
found are read alone (all at once, before any is placed, so the cache is put aside
and back once) and queued for the store. Then the plan's steps run in order: text
between chunks is read in context, each chunk is placed after its link tokens.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

from reame.worker.chunk_plan import LINK_TOKENS, Place, Read, Span, reusable, steps
from reame.worker.chunk_store import ChunkStore
from reame.worker.kv import KvCache, prefill_chunks
from reame.worker.model import DecodeError

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkReuse:
    """What a chunked prefill did not have to read, and how it got the chunks."""

    cached: int  # prompt tokens not computed: the prefix in memory and the chunks from the store
    restored: int  # of those, from the store
    in_memory: int = 0
    from_store: int = 0
    read: int = 0
    link_tokens: int = 0
    # The chunks read alone and their states, for the store (ChunkStore.save): saved once the
    # reply is out, so no client waits for the upload.
    fresh: tuple[tuple[Sequence[int], bytearray], ...] = ()


def prefill(
    kv: KvCache, store: ChunkStore | None, prompt: Sequence[int], spans: Sequence[Span], scope: str,
    n_batch: int, check: Callable[[], None],
) -> ChunkReuse:
    """Bring ``kv`` to ``prompt`` whose chunks are ``spans``; ``store`` None: neither look up nor save."""
    held = [Span(start, end) for start, end in kv.spans]
    keep = kv.keep(reusable(kv.tokens, held, prompt, spans), scope)
    plan = steps(spans, keep, len(prompt))
    wanted = [spans[step.index] for step in plan if isinstance(step, Place)]
    states: dict[Span, tuple[str, bytes | bytearray]] = {}
    for span in dict.fromkeys(wanted):
        if store is not None:
            check()
            found = store.lookup(scope, prompt[span.start : span.end])
            if found is not None:
                states[span] = (found.key, found.state)
    from_store = len(states)
    missing = [span for span in dict.fromkeys(wanted) if span not in states]
    chunks = [prompt[span.start : span.end] for span in missing]
    read = len(missing)
    fresh = kv.read_alone(chunks, LINK_TOKENS, n_batch, check)
    for span, computed in zip(missing, fresh, strict=True):
        states[span] = ("", computed)
    for step in plan:
        check()
        if isinstance(step, Read):
            for start, end in prefill_chunks(step.start, step.end, n_batch):
                check()
                kv.append(prompt[start:end], logits_last=end == len(prompt))
            continue
        span = spans[step.index]
        chunk = prompt[span.start : span.end]
        key, state = states[span]
        if not kv.place(state, chunk, LINK_TOKENS):
            if not key:
                raise DecodeError("llama.cpp refused a chunk state it had just written")
            if store is not None:
                store.report_corrupt(key, "llama.cpp refused to place the chunk state")
            (state,) = kv.read_alone([chunk], LINK_TOKENS, n_batch, check)
            states[span] = ("", state)
            from_store -= 1
            read += 1
            if not kv.place(state, chunk, LINK_TOKENS):
                raise DecodeError("llama.cpp refused a chunk state it had just written")
    in_memory = sum(span.end <= keep for span in spans)
    stored = sum(len(span) - LINK_TOKENS for span in wanted if states[span][0])
    log.info(
        "chunked prefill of %d tokens: %d chunks in memory, %d from the store, %d read alone; %d link tokens",
        len(prompt), in_memory, from_store, read, LINK_TOKENS * len(wanted),
    )
    return ChunkReuse(
        keep + stored, stored, in_memory, from_store, read, LINK_TOKENS * len(wanted),
        tuple(zip(chunks, fresh, strict=True)) if store is not None else (),
    )
