"""Bring the KV cache to a prompt read in chunks (worker.chunk_plan): memory, store, or read alone.

Every chunk the cache does not hold already is looked up in the worker's memory,
then in the store (worker.chunk_store); those not found are read alone (all at
once, before any is placed, so the cache is put aside and back once), held in
memory and queued for the store. Then the plan's steps run in order: text between
chunks is read in context, each chunk is placed after its link tokens.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence

from reame.worker.chunk_plan import LINK_TOKENS, Place, Read, Span, reusable, steps
from reame.worker.chunk_store import ChunkStore, StoredChunk
from reame.worker.kv import KvCache, prefill_chunks
from reame.worker.model import DecodeError

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class ChunkReuse:
    """What a chunked prefill did not have to read, and how it got the chunks."""

    cached: int  # prompt tokens not computed: the prefix kept, the chunks from memory and from the store
    restored: int  # of those, from the store
    in_memory: int = 0  # chunks in the kept prefix or held in the worker's memory
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
    """Bring ``kv`` to ``prompt`` whose chunks are ``spans``; ``store`` None: neither look up nor keep nor save."""
    held = [Span(start, end) for start, end in kv.spans]
    keep = kv.keep(reusable(kv.tokens, held, prompt, spans), scope)
    plan = steps(spans, keep, len(prompt))
    wanted = list(dict.fromkeys(spans[step.index] for step in plan if isinstance(step, Place)))
    found: dict[Span, StoredChunk] = {}
    if store is not None:
        for span in wanted:
            check()
            hit = store.lookup(scope, prompt[span.start : span.end])
            if hit is not None:
                found[span] = hit
    states: dict[Span, bytes | bytearray] = {span: hit.state for span, hit in found.items()}
    fresh: list[tuple[Sequence[int], bytearray]] = []

    def read_alone(missing: Sequence[Span]) -> None:
        chunks = [prompt[span.start : span.end] for span in missing]
        for span, chunk, state in zip(missing, chunks, kv.read_alone(chunks, LINK_TOKENS, n_batch, check), strict=True):
            states[span] = state
            fresh.append((chunk, state))
            if store is not None:
                store.remember(scope, chunk, state)

    read_alone([span for span in wanted if span not in found])
    for step in plan:
        check()
        if isinstance(step, Read):
            for start, end in prefill_chunks(step.start, step.end, n_batch):
                check()
                kv.append(prompt[start:end], logits_last=end == len(prompt))
            continue
        span = spans[step.index]
        chunk = prompt[span.start : span.end]
        if kv.place(states[span], chunk, LINK_TOKENS):
            continue
        hit = found.pop(span, None)
        if hit is None or store is None:
            raise DecodeError("llama.cpp refused a chunk state it had just written")
        store.refused(hit, "llama.cpp refused to place the chunk state")
        read_alone([span])
        if not kv.place(states[span], chunk, LINK_TOKENS):
            raise DecodeError("llama.cpp refused a chunk state it had just written")
    kept = sum(span.end <= keep for span in spans)
    from_memory = sum(hit.in_memory for hit in found.values())
    from_store = len(found) - from_memory
    reused = sum(len(span) - LINK_TOKENS for span in found)
    restored = sum(len(span) - LINK_TOKENS for span, hit in found.items() if not hit.in_memory)
    log.info(
        "chunked prefill of %d tokens: %d chunks in memory, %d from the store, %d read alone; %d link tokens",
        len(prompt), kept + from_memory, from_store, len(fresh), LINK_TOKENS * len(wanted),
    )
    return ChunkReuse(
        keep + reused, restored, kept + from_memory, from_store, len(fresh), LINK_TOKENS * len(wanted),
        tuple(fresh) if store is not None else (),
    )
