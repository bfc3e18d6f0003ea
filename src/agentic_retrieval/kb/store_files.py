"""The files of one embedded store in a data directory, and the lock files named after it.

A store ``stores/<store>`` has its SQLite file (with ``-wal``, ``-shm``), its vectors' graph
and its lexical directory beside it; background work on it holds a lock file named after it
in a directory of the data directory (one process at a time per store, any worker)::

    embedding/<store>.lock      # held by the process embedding its pending chunks
    graph-sync/<store>.lock     # held by the process synchronising its entity graph

Store names carry a random token and are never reused, so a lock file whose store is gone
guards nothing: it goes with the store (:func:`unlink_store`), and one left behind (a data
directory of an older release, a worker that re-created it while the source was being
deleted) is removed before serving (:func:`remove_orphan_locks`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from agentic_retrieval.sources.local.store import VECTOR_FILE_SUFFIX, lexical_directory

EMBEDDING_LOCKS_DIR = "embedding"
"""Where :mod:`agentic_retrieval.kb.background_embedding` locks a store it embeds."""
GRAPH_SYNC_LOCKS_DIR = "graph-sync"
"""Where :mod:`agentic_retrieval.kb.graph_sync` locks a store whose graph it synchronises."""
STORE_LOCKS_DIRS = (EMBEDDING_LOCKS_DIR, GRAPH_SYNC_LOCKS_DIR)


def unlink_store(path: Path) -> None:
    """Remove the store file ``path``, everything kept beside it and its lock files."""
    for suffix in ("", "-wal", "-shm", VECTOR_FILE_SUFFIX):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(lexical_directory(path), ignore_errors=True)
    for locks in STORE_LOCKS_DIRS:
        (path.parent.parent / locks / f"{path.name}.lock").unlink(missing_ok=True)


def remove_orphan_locks(data: Path, stores: Path) -> list[str]:
    """Remove the lock files under ``data`` whose store is not in ``stores``; their paths.

    Call it before serving: a lock file is created when a store's work starts.
    """
    removed = []
    for locks in STORE_LOCKS_DIRS:
        for lock in sorted((data / locks).glob("*.lock")):
            if not (stores / lock.stem).exists():
                lock.unlink(missing_ok=True)
                removed.append(f"{locks}/{lock.name}")
    return removed
