"""Where a chunked prompt's KV state comes from: memory, placed chunks, or reading in context.

In chunk mode (cache.chunks) a prompt is a sequence of regions: chunks, each read
alone (as if the prompt began with it) and stored under its own tokens, and the
text between them, read in context. A chunk is brought in by reading its first
LINK_TOKENS in context, so that they attend to what precedes them (EPIC's
LegoLink: a chunk read alone treats its first tokens as the start of a text),
and placing the stored state of the rest at its position. A cold read does the
same with states it has just computed, so a prompt's KV state, and the greedy
reply, are the same whether its chunks were stored or not.

The KV state of a prompt so read depends on where its chunks are: a prefix held
in memory is reused only as far as the chunks it holds are the new prompt's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Final

from reame.worker.kv import MIN_FRESH, common_prefix

LINK_TOKENS: Final = 16  # a chunk's first tokens, read in context before its stored rest is placed
MIN_CHUNK_TOKENS: Final = 64  # shorter pieces are read in context: the link would be most of them


@dataclasses.dataclass(frozen=True, slots=True)
class Span:
    """A chunk's tokens at prompt positions [start, end)."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


@dataclasses.dataclass(frozen=True, slots=True)
class Read:
    """Read prompt positions [start, end) in context."""

    start: int
    end: int


@dataclasses.dataclass(frozen=True, slots=True)
class Place:
    """Read chunk ``index``'s first LINK_TOKENS in context, then place its stored rest."""

    index: int


def chunk_spans(lengths: Sequence[tuple[int, bool]]) -> tuple[Span, ...]:
    """Return the chunks of a prompt given as runs of (tokens, may be a chunk), in order.

    A run that may be a chunk is one if it has MIN_CHUNK_TOKENS or more; the prompt's
    last MIN_FRESH tokens are always read in context (their logits are needed).
    """
    spans: list[Span] = []
    at = 0
    for length, candidate in lengths:
        if candidate and length >= MIN_CHUNK_TOKENS:
            spans.append(Span(at, at + length))
        at += length
    return tuple(span for span in spans if span.end <= at - MIN_FRESH)


def reusable(held: Sequence[int], held_spans: Sequence[Span], prompt: Sequence[int], spans: Sequence[Span]) -> int:
    """Return how many held tokens the prompt can keep: its prefix, as far as both hold the same chunks there.

    The last MIN_FRESH prompt tokens are always read again (worker.kv.reusable).
    """
    keep = max(0, min(common_prefix(held, prompt), len(prompt) - MIN_FRESH))
    for span in set(held_spans) ^ set(spans):
        keep = min(keep, span.start)
    for span in spans:
        if span.start < keep < span.end:
            keep = span.start  # a chunk is placed whole
    return keep


def steps(spans: Sequence[Span], keep: int, n_prompt: int) -> list[Read | Place]:
    """Return how to bring a KV cache that holds the prompt's first ``keep`` tokens to all ``n_prompt``."""
    out: list[Read | Place] = []
    at = keep
    for index, span in enumerate(spans):
        if span.start < keep:
            continue
        if span.start > at:
            out.append(Read(at, span.start))
        out.append(Place(index))
        at = span.end
    if at < n_prompt:
        out.append(Read(at, n_prompt))
    return out
