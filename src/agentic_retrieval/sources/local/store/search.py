"""Reading ranked chunks back: browsing in file order, and hits fetched by rid."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from agentic_retrieval.sources.local.store.rows import StoredHit


def browse(
    conn: sqlite3.Connection, top: int, where: str, params: list[Any]
) -> list[tuple[int, float]]:
    """The first ``top`` chunks passing ``where`` in file order, scored 0."""
    rows = conn.execute(
        f"SELECT c.rid FROM chunks c WHERE {where} ORDER BY c.file_id, c.ordinal LIMIT ?",
        [*params, top],
    )
    return [(int(r[0]), 0.0) for r in rows]


def allowed_rids(conn: sqlite3.Connection, where: str, params: list[Any]) -> list[int] | None:
    """Every rid passing ``where`` (``None`` when it holds for every chunk)."""
    if where == "1":
        return None
    return [r[0] for r in conn.execute(f"SELECT c.rid FROM chunks c WHERE {where}", params)]


def existing_rids(conn: sqlite3.Connection, ranked: Sequence[tuple[int, float]]) -> set[int]:
    """The rids of ``ranked`` that name a chunk (a lexical index may lag behind a delete)."""
    rows = conn.execute(
        "SELECT rid FROM chunks WHERE rid IN (SELECT value FROM json_each(?))",
        (json.dumps([rid for rid, _ in ranked]),),
    )
    return {int(row[0]) for row in rows}


def fetch_hits(
    conn: sqlite3.Connection,
    ranked: Sequence[tuple[int, float]],
    similarities: Mapping[int, float] | None = None,
) -> list[StoredHit]:
    """The ranked chunks as hits, in rank order (chunks deleted meanwhile left out)."""
    if not ranked:
        return []
    marks = ",".join("?" for _ in ranked)
    rows = conn.execute(
        "SELECT rid, id, title, content, page, metadata, file_id FROM chunks "
        f"WHERE rid IN ({marks})",
        [rid for rid, _ in ranked],
    ).fetchall()
    by_rid = {row[0]: row for row in rows}
    shared = shared_fields(conn, {row[6] for row in rows})
    hits = []
    for rid, score in ranked:
        row = by_rid.get(rid)
        if row is not None:  # deleted between ranking and fetching
            similarity = (similarities or {}).get(rid)
            metadata = {**shared.get(row[6], {}), **json.loads(row[5])}
            hits.append(StoredHit(row[1], row[2], row[3], row[4], metadata, score, similarity))
    return hits


def shared_fields(conn: sqlite3.Connection, file_ids: set[int]) -> dict[int, dict[str, Any]]:
    """The fields each file's chunks share, read and parsed once per file."""
    if not file_ids:
        return {}
    marks = ",".join("?" for _ in file_ids)
    rows = conn.execute(
        f"SELECT id, fields FROM files WHERE id IN ({marks}) AND fields != '{{}}'",
        list(file_ids),
    )
    return {int(file_id): json.loads(fields) for file_id, fields in rows}
