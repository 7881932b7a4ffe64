"""Entry files the way production moves them, for the cache tests.

A worker decodes a hit by feeding its chunks to a PayloadDecoder (worker.cache_client);
the store writes an entry through an EntryWriter (cachekeeper.store.PendingPut).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from reame.cachekeeper.entry import EntryWriter
from reame.shared.kv_entry import Buffer, EntryHeader, PayloadDecoder


def decode(header: EntryHeader, chunks: Iterable[Buffer]) -> bytes | bytearray:
    """Return the raw KV state from an entry's compressed chunks, or raise CorruptEntry."""
    decoder = PayloadDecoder(header)
    for chunk in chunks:
        decoder.feed(chunk)
    return decoder.finish()


def write_file(path: Path, header: EntryHeader, payload: bytes) -> int:
    """Write a whole entry file as the store does; return its size on disk."""
    writer = EntryWriter(path, header)
    writer.write(payload)
    return writer.commit()
