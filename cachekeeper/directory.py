"""Taking over a store directory at open: its lock, its index, and repair after a crash.

One process owns a directory at a time (an flock on :data:`LOCK_NAME`), so at open any
temporary file is a dead writer's and is removed, an unusable index is rebuilt, and the
index is reconciled with the entry files, trusting the files: rows without a file are
dropped, files without a row re-read. A kill -9 at any point therefore costs at most the
entry being written.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import Final

from reame.cachekeeper import entry
from reame.cachekeeper.index import Index, IndexCorrupt, IndexRow, index_files
from reame.shared.kv_entry import CorruptEntry, EntryHeader
from reame.shared.prefix import is_entry_key

log = logging.getLogger("reame.cachekeeper.store")  # the store's own log, as before the split

INDEX_NAME: Final = "index.sqlite3"
LOCK_NAME: Final = ".lock"


class StoreLocked(RuntimeError):
    """Another process owns this store directory."""


def take_directory(directory: Path) -> int:
    """Lock the directory for this process; return the lock's file descriptor (closing it unlocks)."""
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as err:
        os.close(fd)
        raise StoreLocked(f"{directory} is in use by another process") from err
    return fd


def open_index(directory: Path) -> Index:
    """Open the directory's index; an unusable one is deleted, and reconcile() refills the new one."""
    path = directory / INDEX_NAME
    try:
        return Index(path)
    except IndexCorrupt as err:
        log.warning("cache index unusable (%s); rebuilding it from the entry files", err)
        for stale in index_files(path):
            stale.unlink(missing_ok=True)
        return Index(path)


def index_row(key: str, header: EntryHeader, size: int, last_used: float) -> IndexRow:
    """Return the index row of an entry file."""
    return IndexRow(
        key, key + entry.ENTRY_SUFFIX, header.fingerprint, header.kv_type, header.block_tokens, header.n_tokens,
        size, header.created, last_used,
    )


def reconcile(directory: Path, index: Index) -> int:
    """Make the index and the entry files agree, trusting the files; return how many corrupt files were deleted."""
    files: dict[str, Path] = {}
    for path in directory.iterdir():
        if path.name.startswith(".") and path.name.endswith(entry.TEMP_SUFFIX):
            log.info("removing %s, left by a writer that did not finish", path.name)
            path.unlink(missing_ok=True)
        elif path.suffix == entry.ENTRY_SUFFIX and is_entry_key(path.stem):
            files[path.name] = path
    for row in index.rows():
        found = files.pop(row.file, None)
        if found is None:
            index.remove(row.key)  # a row without a file: the file's removal was interrupted
        elif found.stat().st_size != row.bytes or found.stem != row.key:
            index.remove(row.key)
            files[found.name] = found  # re-read below
    # Committed by a writer killed before its index row.
    return sum(not _admit_file(index, unindexed) for unindexed in files.values())


def _admit_file(index: Index, path: Path) -> bool:
    """Index an entry file; False if it was corrupt (and is deleted)."""
    try:
        header = entry.read_header(path)
        if header.key() != path.stem:
            raise CorruptEntry("file name does not match the tokens in its header")
        stat = path.stat()
    except CorruptEntry as err:
        log.warning("deleting corrupt cache entry %s: %s", path.name, err.reason)
        path.unlink(missing_ok=True)
        return False
    except OSError as err:
        log.warning("skipping unreadable cache entry %s: %s", path.name, err)
        return True
    index.add(index_row(path.stem, header, stat.st_size, stat.st_mtime), header.blocks)
    return True
