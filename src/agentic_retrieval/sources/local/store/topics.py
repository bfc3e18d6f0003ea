"""The store's topic index: each chunk vector's broad and fine topic, in tables of the store.

Built from the stored vectors by :func:`~agentic_retrieval.sources.topic_graph.build_communities`
(no model), kept in the same SQLite file as the chunks:

- ``topic_assignments``: ``(rid, broad, fine)`` for every chunk with a vector;
- ``topic_centroids``: the fine topics' unit centroids and their broad topic, so a chunk
  written later is assigned to its nearest topic without a rebuild;
- ``meta['topics']``: the write generation the index reflects, how many vectors the last
  full build saw and how many have changed since.

:func:`refresh` brings it up to date: new vectors are assigned to the existing topics and
deleted ones dropped (incremental) until the vectors changed since the last full build
exceed :data:`REBUILD_SHARE` of what it saw; then the topics are fitted again. A search reads
the index as it is (a chunk not yet assigned counts as a topic of its own) and never waits
for a refresh (see :meth:`LocalStore.search`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np

from agentic_retrieval.errors import TopicBuildStopped
from agentic_retrieval.sources.topic_graph import (
    Communities,
    Stop,
    TopicLimits,
    build_communities,
)

TOPICS_SCHEMA = """
CREATE TABLE IF NOT EXISTS topic_assignments (
    rid INTEGER PRIMARY KEY, broad INTEGER NOT NULL, fine INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS topic_centroids (
    fine INTEGER PRIMARY KEY, broad INTEGER NOT NULL, vector BLOB NOT NULL
);
"""
"""Additive: run on every open (an older file gains the tables, empty)."""
REBUILD_SHARE = 0.2
"""A full rebuild once the vectors added or deleted since the last one exceed this share."""
STATE_KEY = "topics"
_READ_BATCH = 4_096


@dataclass(frozen=True)
class TopicIndexState:
    """What the topic index reflects (``None`` fields: never built).

    Attributes:
        generation: The store's write generation it was last refreshed at.
        vectors: Vectors it assigns.
        built_from: Vectors the last full build saw.
        changed: Vectors added or deleted since the last full build.
        broad_topics: Broad topics.
        fine_topics: Fine topics.
        rebuilt: Whether the last refresh fitted the topics again (rather than assigning).
    """

    generation: int | None = None
    vectors: int = 0
    built_from: int = 0
    changed: int = 0
    broad_topics: int = 0
    fine_topics: int = 0
    rebuilt: bool = False


def read_state(conn: sqlite3.Connection) -> TopicIndexState:
    """The topic index's state (a never-built index: every field empty)."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (STATE_KEY,)).fetchone()
    if row is None:
        return TopicIndexState()
    try:
        return TopicIndexState(**json.loads(row[0]))
    except (TypeError, ValueError):
        return TopicIndexState()


def topics_of(conn: sqlite3.Connection, rids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """The (broad, fine) topic of each of ``rids`` that has one."""
    if not rids:
        return {}
    rows = conn.execute(
        "SELECT rid, broad, fine FROM topic_assignments "
        "WHERE rid IN (SELECT value FROM json_each(?))",
        (json.dumps(list(rids)),),
    )
    return {int(rid): (int(broad), int(fine)) for rid, broad, fine in rows}


def refresh(
    conn: sqlite3.Connection,
    write: Callable[[], AbstractContextManager[sqlite3.Connection]],
    generation: int,
    limits: TopicLimits | None = None,
    stop: Stop | None = None,
) -> TopicIndexState:
    """Bring the topic index up to ``generation``: assign what is new, or rebuild.

    Reads happen before the write transaction (a reader's view), so writers wait only for
    the final rewrite of the tables.

    Raises:
        TopicBuildStopped: ``stop`` answered true (checked between rounds and batches);
            nothing was written.
    """
    limits = limits or TopicLimits()
    state = read_state(conn)
    centroids = _centroids(conn)
    added = [int(r[0]) for r in conn.execute(_ADDED)]
    deleted = [int(r[0]) for r in conn.execute(_DELETED)]
    changed = state.changed + len(added) + len(deleted)
    if centroids is None or changed > REBUILD_SHARE * max(state.built_from, 1):
        return _rebuild(conn, write, generation, limits, stop)
    rows = _assigned(conn, centroids, added, limits.batch, stop)
    with write() as tx:
        tx.executemany("DELETE FROM topic_assignments WHERE rid = ?", [(r,) for r in deleted])
        tx.executemany("INSERT OR REPLACE INTO topic_assignments VALUES (?, ?, ?)", rows)
        new = TopicIndexState(
            generation=generation,
            vectors=state.vectors + len(added) - len(deleted),
            built_from=state.built_from,
            changed=changed,
            broad_topics=state.broad_topics,
            fine_topics=state.fine_topics,
        )
        _write_state(tx, new)
    return new


_ADDED = (
    "SELECT c.rid FROM chunks c WHERE c.vector IS NOT NULL AND NOT EXISTS "
    "(SELECT 1 FROM topic_assignments t WHERE t.rid = c.rid)"
)
_DELETED = (
    "SELECT t.rid FROM topic_assignments t WHERE NOT EXISTS "
    "(SELECT 1 FROM chunks c WHERE c.rid = t.rid AND c.vector IS NOT NULL)"
)


def _rebuild(
    conn: sqlite3.Connection,
    write: Callable[[], AbstractContextManager[sqlite3.Connection]],
    generation: int,
    limits: TopicLimits,
    stop: Stop | None,
) -> TopicIndexState:
    rids = [int(r[0]) for r in conn.execute("SELECT rid FROM chunks WHERE vector IS NOT NULL")]
    rng = np.random.default_rng(0)
    sample = (
        sorted(int(r) for r in rng.choice(rids, limits.fit_sample, replace=False))
        if len(rids) > limits.fit_sample
        else rids
    )
    communities = (
        build_communities(_stack(_vectors(conn, sample)), seed=0, limits=limits, stop=stop)
        if sample
        else None
    )
    rows = _assigned(conn, communities, rids, limits.batch, stop) if communities else []
    state = TopicIndexState(
        generation=generation,
        vectors=len(rows),
        built_from=len(rows),
        changed=0,
        broad_topics=len(communities.broad_centroids) if communities else 0,
        fine_topics=len(communities.fine_centroids) if communities else 0,
        rebuilt=True,
    )
    with write() as tx:
        tx.execute("DELETE FROM topic_assignments")
        tx.execute("DELETE FROM topic_centroids")
        if communities is not None:
            tx.executemany(
                "INSERT INTO topic_centroids VALUES (?, ?, ?)",
                [
                    (fine, int(communities.fine_parent[fine]), vector.tobytes())
                    for fine, vector in enumerate(communities.fine_centroids)
                ],
            )
        tx.executemany("INSERT INTO topic_assignments VALUES (?, ?, ?)", rows)
        _write_state(tx, state)
    return state


def _assigned(
    conn: sqlite3.Connection,
    communities: Communities,
    rids: Sequence[int],
    batch: int,
    stop: Stop | None = None,
) -> list[tuple[int, int, int]]:
    """``(rid, broad, fine)`` of each of ``rids``, their vectors read and assigned in batches."""
    rows: list[tuple[int, int, int]] = []
    for start in range(0, len(rids), batch):
        if stop is not None and stop():
            raise TopicBuildStopped("the topic refresh was stopped")
        found = list(_vectors(conn, rids[start : start + batch]))
        if not found:
            continue
        broad, fine = communities.assign(_stack(found), batch)
        rows.extend(
            (rid, int(b), int(f)) for (rid, _), b, f in zip(found, broad, fine, strict=True)
        )
    return rows


def _vectors(conn: sqlite3.Connection, rids: Sequence[int]) -> Iterator[tuple[int, np.ndarray]]:
    for start in range(0, len(rids), _READ_BATCH):
        part = json.dumps(list(rids[start : start + _READ_BATCH]))
        rows = conn.execute(
            "SELECT rid, vector FROM chunks WHERE vector IS NOT NULL "
            "AND rid IN (SELECT value FROM json_each(?)) ORDER BY rid",
            (part,),
        )
        for rid, blob in rows:
            yield int(rid), np.frombuffer(blob, dtype=np.float32)


def _stack(
    found: Sequence[tuple[int, np.ndarray]] | Iterator[tuple[int, np.ndarray]],
) -> np.ndarray:
    return np.stack([vector for _, vector in found])


def _centroids(conn: sqlite3.Connection) -> Communities | None:
    rows = conn.execute("SELECT fine, broad, vector FROM topic_centroids ORDER BY fine").fetchall()
    if not rows:
        return None
    fine = np.stack([np.frombuffer(blob, dtype=np.float32) for _, _, blob in rows])
    parent = np.asarray([broad for _, broad, _ in rows], dtype=np.int64)
    return Communities(broad_centroids=fine[:0], fine_centroids=fine, fine_parent=parent)


def _write_state(conn: sqlite3.Connection, state: TopicIndexState) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
        (STATE_KEY, json.dumps(state.__dict__)),
    )
