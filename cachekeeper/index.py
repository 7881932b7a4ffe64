"""Keep the SQLite index of cache entries: their sizes, recency, and block hashes.

The entry files are the truth; this index only makes lookups and eviction fast.
Anything wrong with it (missing, not a database, failing its check, an unknown
schema) raises IndexCorrupt at open, and the store rebuilds it from the entry
headers. WAL mode keeps committed rows across a kill -9 of the process.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final

SCHEMA_VERSION: Final = "1"
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    file TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    kv_type TEXT NOT NULL,
    block_tokens INTEGER NOT NULL,
    n_tokens INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    created REAL NOT NULL,
    last_used REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_last_used ON entries (last_used);
CREATE TABLE IF NOT EXISTS blocks (
    hash BLOB NOT NULL,
    key TEXT NOT NULL,
    depth INTEGER NOT NULL,
    PRIMARY KEY (hash, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS blocks_by_key ON blocks (key);
"""
_COLUMNS: Final = "key, file, fingerprint, kv_type, block_tokens, n_tokens, bytes, created, last_used"


class IndexCorrupt(Exception):
    """The index file cannot be used and must be rebuilt from the entry files."""


@dataclasses.dataclass(frozen=True, slots=True)
class IndexRow:
    """One committed entry as the index knows it."""

    key: str
    file: str  # name inside the store directory
    fingerprint: str
    kv_type: str
    block_tokens: int
    n_tokens: int
    bytes: int  # size of the file on disk
    created: float
    last_used: float


def index_files(path: Path) -> list[Path]:
    """Return the database file and its WAL companions."""
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


class Index:
    """The entries of one store directory, queried by key, by recency, and by block hash."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._db = sqlite3.connect(path, check_same_thread=False)
        except sqlite3.Error as err:
            raise IndexCorrupt(f"cannot open {path}: {err}") from err
        try:
            self._prepare()
        except (sqlite3.Error, IndexCorrupt) as err:
            self._db.close()
            raise IndexCorrupt(f"{path}: {err}") from err

    def _prepare(self) -> None:
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode never corrupts; a power cut may lose the last commits, which
        # the store's reconciliation with the entry files repairs.
        db.execute("PRAGMA synchronous=NORMAL")
        check = db.execute("PRAGMA quick_check").fetchall()
        if check != [("ok",)]:
            raise IndexCorrupt(f"quick_check failed: {check[:3]}")
        with db:
            db.executescript(_SCHEMA)
            found = db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
            if found is None:
                db.execute("INSERT INTO meta (name, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))
            elif found[0] != SCHEMA_VERSION:
                raise IndexCorrupt(f"schema version {found[0]!r}, expected {SCHEMA_VERSION!r}")

    def close(self) -> None:
        self._db.close()

    def add(self, row: IndexRow, blocks: Sequence[bytes]) -> None:
        """Insert or replace an entry and its block hashes (block i at depth i + 1)."""
        with self._db as db:
            db.execute("DELETE FROM blocks WHERE key = ?", (row.key,))
            db.execute(
                f"INSERT OR REPLACE INTO entries ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                dataclasses.astuple(row),
            )
            db.executemany(
                "INSERT OR REPLACE INTO blocks (hash, key, depth) VALUES (?, ?, ?)",
                ((h, row.key, depth) for depth, h in enumerate(blocks, start=1)),
            )

    def remove(self, key: str) -> bool:
        """Forget an entry; return whether it was there."""
        with self._db as db:
            db.execute("DELETE FROM blocks WHERE key = ?", (key,))
            return db.execute("DELETE FROM entries WHERE key = ?", (key,)).rowcount > 0

    def get(self, key: str) -> IndexRow | None:
        found = self._db.execute(f"SELECT {_COLUMNS} FROM entries WHERE key = ?", (key,)).fetchone()
        return None if found is None else IndexRow(*found)

    def touch(self, key: str, when: float) -> None:
        with self._db as db:
            db.execute("UPDATE entries SET last_used = ? WHERE key = ?", (when, key))

    def deepest(self, fingerprint: str, hashes: Sequence[bytes]) -> tuple[str, int] | None:
        """Return (key, depth) of the entry sharing the most leading block hashes.

        The hashes are chained and every entry holds all of its own, so if hash d is
        present so is every hash before it: binary search finds the deepest present
        one in log2(len(hashes)) indexed probes. Ties go to the most recently used.
        """
        present, absent = 0, len(hashes) + 1
        while absent - present > 1:
            middle = (present + absent) // 2
            if self._present(fingerprint, hashes[middle - 1]):
                present = middle
            else:
                absent = middle
        if present == 0:
            return None
        found = self._db.execute(
            "SELECT e.key FROM blocks AS b JOIN entries AS e ON e.key = b.key "
            "WHERE b.hash = ? AND e.fingerprint = ? ORDER BY e.last_used DESC LIMIT 1",
            (hashes[present - 1], fingerprint),
        ).fetchone()
        return (str(found[0]), present) if found is not None else None

    def _present(self, fingerprint: str, block_hash: bytes) -> bool:
        found = self._db.execute(
            "SELECT 1 FROM blocks AS b JOIN entries AS e ON e.key = b.key "
            "WHERE b.hash = ? AND e.fingerprint = ? LIMIT 1",
            (block_hash, fingerprint),
        ).fetchone()
        return found is not None

    def rows(self) -> list[IndexRow]:
        return [IndexRow(*found) for found in self._db.execute(f"SELECT {_COLUMNS} FROM entries")]

    def least_recent(self) -> Iterator[IndexRow]:
        """Yield entries from the least recently used on."""
        found = self._db.execute(f"SELECT {_COLUMNS} FROM entries ORDER BY last_used ASC, key ASC").fetchall()
        for row in found:
            yield IndexRow(*row)

    def total_bytes(self) -> int:
        return int(self._db.execute("SELECT COALESCE(SUM(bytes), 0) FROM entries").fetchone()[0])

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def latest_use(self) -> float:
        return float(self._db.execute("SELECT COALESCE(MAX(last_used), 0) FROM entries").fetchone()[0])
