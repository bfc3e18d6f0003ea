"""The edge list: one row per assertion, with its provenance, in SQLite.

Azure's ``graphProfile`` of kind ``edgeList`` stores "one index document = one assertion about
a fact"; this table has the same roles as columns (``assertion_id`` the key, ``fact_id``,
``graph_name``, subject id/name/type/confidence, predicate and its confidence, object
id/name/type/confidence or a literal, the overall confidence, the source chunk and its parent
document). The same fact stated in two chunks is two assertions of one ``fact_id``.

It lives in the embedded store's SQLite file (or any other path), in its own tables: chosen
by measurement over an embedded graph database (``benchmarks/README.md``, "Entity graph
store"). Writes are per document and all-or-nothing: :meth:`EdgeStore.replace_document` swaps
a document's assertions in one transaction, :meth:`EdgeStore.delete_document` removes them.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS graph_assertions (
    assertion_id TEXT PRIMARY KEY,
    fact_id TEXT NOT NULL,
    graph_name TEXT NOT NULL,
    subject_id TEXT NOT NULL,
    subject_name TEXT NOT NULL,
    subject_type TEXT NOT NULL,
    subject_confidence REAL,
    predicate TEXT NOT NULL,
    predicate_confidence REAL,
    object_id TEXT,
    object_name TEXT,
    object_type TEXT,
    object_confidence REAL,
    object_literal TEXT,
    confidence REAL NOT NULL,
    source_chunk_id TEXT NOT NULL,
    source_parent_id TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS graph_documents (
    graph_name TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    PRIMARY KEY (graph_name, parent_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS graph_by_subject ON graph_assertions(graph_name, subject_id);
CREATE INDEX IF NOT EXISTS graph_by_object ON graph_assertions(graph_name, object_id);
CREATE INDEX IF NOT EXISTS graph_by_parent ON graph_assertions(graph_name, source_parent_id);
CREATE INDEX IF NOT EXISTS graph_by_subject_type ON graph_assertions(graph_name, subject_type);
CREATE INDEX IF NOT EXISTS graph_by_object_type ON graph_assertions(graph_name, object_type);
"""

_COLUMNS = (
    "assertion_id",
    "fact_id",
    "graph_name",
    "subject_id",
    "subject_name",
    "subject_type",
    "subject_confidence",
    "predicate",
    "predicate_confidence",
    "object_id",
    "object_name",
    "object_type",
    "object_confidence",
    "object_literal",
    "confidence",
    "source_chunk_id",
    "source_parent_id",
)
_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM graph_assertions"


_WORD = re.compile(r"\w+")


def entity_id(cls: str, name: str) -> str:
    """A stable entity id: its class and its name, case and spacing folded.

    "Acme Corp" and "acme  corp" of one class are one entity; the names seen stay its aliases.
    """
    words = " ".join(_WORD.findall(name.casefold()))
    return f"{cls}:{words}"


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Assertion:
    """One assertion about a fact, with where it was read."""

    assertion_id: str
    fact_id: str
    graph_name: str
    subject_id: str
    subject_name: str
    subject_type: str
    subject_confidence: float | None
    predicate: str
    predicate_confidence: float | None
    object_id: str | None
    object_name: str | None
    object_type: str | None
    object_confidence: float | None
    object_literal: str | float | bool | None
    confidence: float
    source_chunk_id: str
    source_parent_id: str

    @classmethod
    def create(
        cls,
        graph_name: str,
        subject: tuple[str, str],
        predicate: str,
        obj: tuple[str, str] | None,
        *,
        literal: str | float | bool | None = None,
        chunk_id: str,
        parent_id: str,
        confidence: float = 1.0,
        subject_confidence: float | None = None,
        predicate_confidence: float | None = None,
        object_confidence: float | None = None,
    ) -> Assertion:
        """An assertion with its ids derived: ``subject``/``obj`` are (name, class)."""
        subject_id = entity_id(subject[1], subject[0])
        object_id = entity_id(obj[1], obj[0]) if obj else None
        fact = _digest(graph_name, subject_id, predicate, object_id, literal)
        return cls(
            assertion_id=_digest(fact, chunk_id),
            fact_id=fact,
            graph_name=graph_name,
            subject_id=subject_id,
            subject_name=subject[0],
            subject_type=subject[1],
            subject_confidence=subject_confidence,
            predicate=predicate,
            predicate_confidence=predicate_confidence,
            object_id=object_id,
            object_name=obj[0] if obj else None,
            object_type=obj[1] if obj else None,
            object_confidence=object_confidence,
            object_literal=literal,
            confidence=confidence,
            source_chunk_id=chunk_id,
            source_parent_id=parent_id,
        )

    def row(self) -> tuple[Any, ...]:
        """The values in column order (the literal as JSON, keeping its kind)."""
        values = [getattr(self, c) for c in _COLUMNS]
        literal_at = _COLUMNS.index("object_literal")
        if self.object_literal is not None:
            values[literal_at] = json.dumps(self.object_literal)
        return tuple(values)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Assertion:
        """An assertion read back from a row in column order."""
        values = dict(zip(_COLUMNS, row, strict=True))
        if values["object_literal"] is not None:
            values["object_literal"] = json.loads(values["object_literal"])
        return cls(**values)

    def render(self) -> dict[str, Any]:
        """The assertion in Azure's field roles (camelCase), for ``sourceData``."""
        return {
            "assertionId": self.assertion_id,
            "factId": self.fact_id,
            "subjectId": self.subject_id,
            "subject": self.subject_name,
            "subjectType": self.subject_type,
            "predicate": self.predicate,
            "objectId": self.object_id,
            "object": self.object_name if self.object_id else self.object_literal,
            "objectType": self.object_type,
            "confidence": self.confidence,
            "sourceChunkId": self.source_chunk_id,
            "sourceParentId": self.source_parent_id,
        }


@dataclass(frozen=True)
class Entity:
    """A node of the graph as the edges name it."""

    id: str
    name: str
    type: str


class EdgeStore:
    """The assertions of one or more graphs in a SQLite file, safe to use from many threads.

    Args:
        path: The SQLite file (the embedded store's own file is fine: the tables are its own).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._local = threading.local()
        with self._connect() as conn:
            conn.executescript(SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            # a commit stays atomic; only the last ones may be lost to a power cut, and a
            # lost document extraction is redone from its content hash
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def replace_document(
        self,
        graph_name: str,
        parent_id: str,
        assertions: Iterable[Assertion],
        content_hash: str | None = None,
    ) -> int:
        """Swap ``parent_id``'s assertions for ``assertions`` in one transaction.

        ``content_hash`` records which version of the document they were read from
        (:meth:`extracted_versions`), in the same transaction.

        Returns:
            How many assertions were written.
        """
        rows = [a.row() for a in assertions]
        conn = self._connect()
        marks = ", ".join("?" for _ in _COLUMNS)
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "DELETE FROM graph_assertions WHERE graph_name = ? AND source_parent_id = ?",
                (graph_name, parent_id),
            )
            conn.executemany(f"INSERT OR REPLACE INTO graph_assertions VALUES ({marks})", rows)
            if content_hash is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO graph_documents VALUES (?, ?, ?)",
                    (graph_name, parent_id, content_hash),
                )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return len(rows)

    def delete_document(self, graph_name: str, parent_id: str) -> int:
        """Remove ``parent_id``'s assertions; return how many there were."""
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            cursor = conn.execute(
                "DELETE FROM graph_assertions WHERE graph_name = ? AND source_parent_id = ?",
                (graph_name, parent_id),
            )
            conn.execute(
                "DELETE FROM graph_documents WHERE graph_name = ? AND parent_id = ?",
                (graph_name, parent_id),
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return cursor.rowcount

    def extracted_versions(self, graph_name: str) -> dict[str, str]:
        """The content hash each extracted document was read at, by parent id."""
        rows = self._connect().execute(
            "SELECT parent_id, content_hash FROM graph_documents WHERE graph_name = ?",
            (graph_name,),
        )
        return {parent: content_hash for parent, content_hash in rows}

    def count(self, graph_name: str, parent_id: str | None = None) -> int:
        """How many assertions the graph (or one of its documents) holds."""
        sql, args = "SELECT count(*) FROM graph_assertions WHERE graph_name = ?", [graph_name]
        if parent_id is not None:
            sql += " AND source_parent_id = ?"
            args.append(parent_id)
        return int(self._connect().execute(sql, args).fetchone()[0])

    def assertions(self, graph_name: str, parent_id: str | None = None) -> list[Assertion]:
        """Every assertion of the graph (or of one document), in a stable order."""
        sql, args = f"{_SELECT} WHERE graph_name = ?", [graph_name]
        if parent_id is not None:
            sql += " AND source_parent_id = ?"
            args.append(parent_id)
        rows = self._connect().execute(sql + " ORDER BY assertion_id", args)
        return [Assertion.from_row(r) for r in rows]

    def edges(
        self,
        graph_name: str,
        node_ids: Sequence[str],
        *,
        direction: str,
        predicate: str | None,
        limit: int,
    ) -> list[Assertion]:
        """Assertions leaving (``out``) or reaching (``in``) any of ``node_ids``, at most ``limit``.

        Args:
            graph_name: The graph.
            node_ids: Entity ids at the known end.
            direction: ``out`` (they are subjects) or ``in`` (they are objects).
            predicate: Only this property (``None``: any).
            limit: Most rows read (the caller's cost bound).
        """
        if not node_ids:
            return []
        column = "subject_id" if direction == "out" else "object_id"
        sql = f"{_SELECT} WHERE graph_name = ? AND {column} IN (SELECT value FROM json_each(?))"
        args: list[Any] = [graph_name, json.dumps(list(node_ids))]
        if predicate is not None:
            sql += " AND predicate = ?"
            args.append(predicate)
        rows = self._connect().execute(sql + " LIMIT ?", [*args, limit])
        return [Assertion.from_row(r) for r in rows]

    def entities(self, graph_name: str, classes: Sequence[str] | None, limit: int) -> list[Entity]:
        """Distinct entities (of ``classes``, when given), at most ``limit``."""
        where = "graph_name = ?"
        subject_where, object_where = where, where + " AND object_id IS NOT NULL"
        if classes is not None:
            subject_where += " AND subject_type IN (SELECT value FROM json_each(?))"
            object_where += " AND object_type IN (SELECT value FROM json_each(?))"
        sides: list[Any] = [graph_name] + ([json.dumps(list(classes))] if classes else [])
        sql = (
            f"SELECT subject_id, subject_name, subject_type FROM graph_assertions "
            f"WHERE {subject_where} UNION "
            f"SELECT object_id, object_name, object_type FROM graph_assertions "
            f"WHERE {object_where} LIMIT ?"
        )
        rows = self._connect().execute(sql, [*sides, *sides, limit])
        return _unique_entities(rows)

    def entities_by_id(self, graph_name: str, ids: Sequence[str]) -> list[Entity]:
        """The entities with these ids that some assertion names."""
        if not ids:
            return []
        sql = (
            "SELECT subject_id, subject_name, subject_type FROM graph_assertions "
            "WHERE graph_name = ? AND subject_id IN (SELECT value FROM json_each(?)) UNION "
            "SELECT object_id, object_name, object_type FROM graph_assertions "
            "WHERE graph_name = ? AND object_id IN (SELECT value FROM json_each(?))"
        )
        encoded = json.dumps(list(ids))
        rows = self._connect().execute(sql, [graph_name, encoded, graph_name, encoded])
        return _unique_entities(rows)


def _unique_entities(rows: Iterable[Sequence[Any]]) -> list[Entity]:
    """One entity per id (the first name seen; the others are its aliases)."""
    seen: dict[str, Entity] = {}
    for entity, name, cls in rows:
        if entity is not None and entity not in seen:
            seen[entity] = Entity(entity, name, cls)
    return list(seen.values())
