"""Read and write cache entry files: one stored KV state per file, safe against kills and bit rot.

The format itself (header, payload encoding, checksums) is ``shared/kv_entry.py``:
the worker needs it too. This module only moves entries between files and memory.

A writer fills a temporary file in the entry's directory, fsyncs it, renames it over
the final name and fsyncs the directory, so a kill at any moment leaves either no
entry or a whole one. A damaged file surfaces as CorruptEntry with a reason.
"""

from __future__ import annotations

import os
import secrets
import zlib
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Final

from reame.shared.kv_entry import (
    CHUNK_BYTES,
    FIXED_HEADER_BYTES,
    Buffer,
    CorruptEntry,
    EntryHeader,
    decode_header,
    parse_fixed_header,
)

TEMP_SUFFIX: Final = ".tmp"
ENTRY_SUFFIX: Final = ".kv"


def _read_exact(fd: int, size: int, offset: int, what: str) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise CorruptEntry(f"truncated {what}: {len(data)} of {size} bytes at offset {offset}")
    return data


def _read_header(fd: int) -> tuple[EntryHeader, int]:
    """Read and check the header of an open entry file; return it and the payload offset."""
    fixed = _read_exact(fd, FIXED_HEADER_BYTES, 0, "fixed header")
    header_len, _crc = parse_fixed_header(fixed)
    header = decode_header(fixed + _read_exact(fd, header_len, FIXED_HEADER_BYTES, "header"))
    offset = FIXED_HEADER_BYTES + header_len
    size = os.fstat(fd).st_size
    if size < offset + header.payload_len:
        raise CorruptEntry(f"truncated payload: file has {size} bytes, header says {offset + header.payload_len}")
    if size > offset + header.payload_len:
        raise CorruptEntry(f"trailing bytes: file has {size} bytes, header says {offset + header.payload_len}")
    return header, offset


class EntryReader:
    """An open entry file: its checked header now, its payload as compressed chunks on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)
        try:
            self.header, self._offset = _read_header(self._fd)
        except BaseException:
            os.close(self._fd)
            raise

    def header_bytes(self) -> bytes:
        """Return the file's fixed and msgpack headers as they are on disk (checked at open)."""
        return _read_exact(self._fd, self._offset, 0, "header")

    def chunks(self, chunk_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """Yield the compressed payload; raise CorruptEntry before the last chunk if it is damaged."""
        total, crc, done = self.header.payload_len, 0, 0
        while done < total:
            chunk = _read_exact(self._fd, min(chunk_bytes, total - done), self._offset + done, "payload")
            crc = zlib.crc32(chunk, crc)
            done += len(chunk)
            if done == total and crc != self.header.checksum:
                raise CorruptEntry("payload checksum mismatch")
            yield chunk

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> EntryReader:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def split_entry(data: Buffer) -> tuple[EntryHeader, memoryview]:
    """Return the checked header of a whole entry held in memory and its payload (checked when written).

    The same checks as reading a file: the shared tier (cachekeeper.tier) hands entries
    over as their files' bytes, and an EntryWriter then checks the payload's checksum.
    """
    view = memoryview(data).cast("B")
    if len(view) < FIXED_HEADER_BYTES:
        raise CorruptEntry(f"truncated fixed header: {len(view)} of {FIXED_HEADER_BYTES} bytes")
    header_len, _crc = parse_fixed_header(bytes(view[:FIXED_HEADER_BYTES]))
    offset = FIXED_HEADER_BYTES + header_len
    if len(view) < offset:
        raise CorruptEntry(f"truncated header: {len(view) - FIXED_HEADER_BYTES} of {header_len} bytes")
    header = decode_header(bytes(view[:offset]))
    if len(view) != offset + header.payload_len:
        raise CorruptEntry(f"entry is {len(view)} bytes, its header says {offset + header.payload_len}")
    return header, view[offset:]


def read_header(path: Path) -> EntryHeader:
    """Return an entry's checked header without reading its payload."""
    with EntryReader(path) as reader:
        return reader.header


def check_entry(path: Path) -> EntryHeader:
    """Read a whole entry, checking header and payload checksums; return its header."""
    with EntryReader(path) as reader:
        for _ in reader.chunks():
            pass
        return reader.header


def fsync_directory(directory: Path) -> None:
    """Make a rename or unlink in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class EntryWriter:
    """Write one entry to a temporary file; ``commit`` makes it visible whole, ``abort`` drops it."""

    def __init__(self, path: Path, header: EntryHeader) -> None:
        self.path = path
        self.header = header
        self.temp_path = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
        self._fd = os.open(self.temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._written = 0
        self._crc = 0
        try:
            self._write_all(header.encode())
        except BaseException:
            self.abort()
            raise

    @property
    def written(self) -> int:
        """Return how many payload bytes have been written so far."""
        return self._written

    def _write_all(self, data: Buffer) -> None:
        view = memoryview(data).cast("B")
        while view:
            view = view[os.write(self._fd, view) :]

    def write(self, chunk: Buffer) -> None:
        """Append compressed payload bytes; more than the header declares is refused."""
        if self._fd < 0:
            raise ValueError("the entry writer is closed")
        if self._written + len(chunk) > self.header.payload_len:
            raise CorruptEntry(f"payload longer than the declared {self.header.payload_len} bytes")
        self._write_all(chunk)
        self._written += len(chunk)
        self._crc = zlib.crc32(chunk, self._crc)

    def commit(self) -> int:
        """Check the payload, make the entry durable and visible; return its size on disk."""
        if self._fd < 0:
            raise ValueError("the entry writer is closed")
        try:
            if self._written != self.header.payload_len:
                raise CorruptEntry(f"payload is {self._written} bytes, header declares {self.header.payload_len}")
            if self._crc != self.header.checksum:
                raise CorruptEntry("payload checksum mismatch")
            os.fsync(self._fd)
            size = os.fstat(self._fd).st_size
            os.close(self._fd)
            self._fd = -1
            os.replace(self.temp_path, self.path)
        except BaseException:
            self.abort()
            raise
        fsync_directory(self.path.parent)
        return size

    def abort(self) -> None:
        """Drop the temporary file; safe to call more than once."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.temp_path.unlink(missing_ok=True)

