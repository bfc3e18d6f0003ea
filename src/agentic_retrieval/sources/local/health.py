"""Noticing, once, that a store's file was damaged, replaced or repaired while it is read.

SQLite connections cache pages: after the file under a running server is overwritten, some
reads still succeed from cache while others fail, so answers would flip between full and
partial, and every failure would log a traceback. Instead, before each search the store
compares the file's identity (inode, size, modification time, and its WAL's) with the last
one it checked, which costs a ``stat``. When it changed, the file's 16-byte SQLite header
is read; when that is gone, or when a query reports corruption, the store is marked
damaged once (one warning in the log): from then on every search fails fast with
:class:`StoreUnavailableError` (the source answers with an error record, the request with
206), without touching the file. When the file changes again (repaired, restored, or
re-indexed), the store reconnects, runs SQLite's ``quick_check`` and serves it again.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentic_retrieval.errors import StoreUnavailableError

logger = logging.getLogger(__name__)

SQLITE_HEADER = b"SQLite format 3\x00"
_DAMAGE_CODES = ("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_IOERR", "SQLITE_CANTOPEN")


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """What changes when a file is written, replaced or restored."""

    inode: int
    size: int
    mtime_ns: int
    wal: tuple[int, int, int] | None


def identity(path: Path) -> FileIdentity | None:
    """The identity of ``path`` and its ``-wal`` file, or ``None`` when ``path`` is missing."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    try:
        wal_stat = os.stat(f"{path}-wal")
        wal = (wal_stat.st_ino, wal_stat.st_size, wal_stat.st_mtime_ns)
    except OSError:
        wal = None
    return FileIdentity(stat.st_ino, stat.st_size, stat.st_mtime_ns, wal)


def has_sqlite_header(path: Path) -> bool:
    """Whether ``path`` starts with SQLite's magic header."""
    try:
        with open(path, "rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def is_damage(exc: sqlite3.Error) -> bool:
    """Whether a SQLite error means the file is damaged (not busy, locked or interrupted)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(_DAMAGE_CODES):
        return True
    # a lost schema ("no such table: chunks") is damage too
    return name == "SQLITE_ERROR" and "no such" in str(exc)


class StoreHealth:
    """The damaged/healthy state of one store file (thread-safe).

    Args:
        path: The SQLite file.

    Attributes:
        epoch: Bumped whenever connections must be reopened (the file was replaced, found
            damaged, or is being recovered); the store's threads compare it with the epoch
            of their own connection.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.epoch = 0
        self.damage: str | None = None
        self._seen = identity(path)
        self._lock = threading.Lock()

    def check(self, recover: Callable[[], None]) -> None:
        """Raise :class:`StoreUnavailableError` unless the file is fit to read.

        Args:
            recover: Validates the file on a fresh connection (raising ``sqlite3.Error``
                when it is still unusable); called when a damaged file has changed.
        """
        current = identity(self.path)
        if current == self._seen and self.damage is None:
            return
        with self._lock:
            if self.damage is not None:
                self._retry(current, recover)
                return
            if current == self._seen:
                return
            if current is None:
                raise self._mark(current, "its index file is missing")
            if not has_sqlite_header(self.path):
                if not self.path.exists():  # deleted between the two looks
                    raise self._mark(None, "its index file is missing")
                raise self._mark(current, "its index file is damaged (not an SQLite database)")
            if self._seen is None or current.inode != self._seen.inode:
                self.epoch += 1  # replaced by another file: stop reading the old one
            self._seen = current

    def damaged(self, exc: sqlite3.Error) -> StoreUnavailableError:
        """Record that a query found the file damaged; return the error to raise."""
        with self._lock:
            if self.damage is not None:
                return StoreUnavailableError(self.path, self.damage)
            return self._mark(identity(self.path), "its index file is damaged", detail=str(exc))

    def _retry(self, current: FileIdentity | None, recover: Callable[[], None]) -> None:
        assert self.damage is not None
        if current == self._seen or current is None:
            raise StoreUnavailableError(self.path, self.damage)
        self._seen = current
        self.epoch += 1
        try:
            recover()
        except sqlite3.Error:
            raise StoreUnavailableError(self.path, self.damage) from None
        logger.warning("local index %s is readable again: serving it", self.path)
        self.damage = None

    def _mark(
        self, current: FileIdentity | None, reason: str, detail: str = ""
    ) -> StoreUnavailableError:
        self._seen = current
        self.damage = reason
        self.epoch += 1  # no connection reads cached pages of a damaged file
        logger.warning(
            "local index %s: %s%s; its searches fail until it is repaired or re-indexed",
            self.path,
            reason,
            f" ({detail})" if detail else "",
        )
        return StoreUnavailableError(self.path, reason)
