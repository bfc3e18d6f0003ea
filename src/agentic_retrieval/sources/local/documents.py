"""Keyed documents in a :class:`LocalStore`: each stored whole, with its chunks, atomically.

The knowledge service keeps two kinds of keyed units in embedded stores: the documents of an
index (pushed with ``docs/index``) and the files of a ``file`` knowledge source. Both are
records in the store's sense (``files`` rows whose path is ``record:<key>``; chunk ids
``<key>#<n>``, see :mod:`agentic_retrieval.sources.local.records`): the unit's own JSON (the
document, or the file's description) is the row's stored metadata, and its text is chunked
like any file. :meth:`DocumentStore.put` replaces a unit and its chunks in one transaction,
so a process killed mid-batch leaves every unit either entirely old or entirely new.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentic_retrieval.odata import Expr
from agentic_retrieval.permissions import ANONYMOUS, Access, Permissions
from agentic_retrieval.sources.local.chunking import DEFAULT_CHUNK_SIZE, DEFAULT_OVERLAP, chunks_of
from agentic_retrieval.sources.local.loaders import Section
from agentic_retrieval.sources.local.store import (
    RECORD_PREFIX,
    ChunkRecord,
    FileState,
    LocalStore,
    MetadataJson,
    StoredHit,
    json_default,
)

CHUNK_SEPARATOR = "#"
"""Between a unit's key and its chunk number in chunk ids (file chunk ids never hold it)."""
_SEARCH_DEPTH_ROUNDS = 4


@dataclass(frozen=True, slots=True)
class DocumentHit:
    """A search result: the unit's key, its best chunk and that chunk's score."""

    key: str
    score: float
    chunk: StoredHit


class DocumentStore:
    """Keyed units (documents, uploaded files) over one :class:`LocalStore`.

    Args:
        store: The embedded store (shared; this object holds no state of its own).
        chunk_size: Maximum chunk length in characters.
        overlap: Characters of whole sentences repeated between consecutive chunks.
    """

    def __init__(
        self,
        store: LocalStore,
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        overlap: int = DEFAULT_OVERLAP,
    ) -> None:
        self.store = store
        self.chunk_size = chunk_size
        self.overlap = overlap

    def put(
        self,
        key: str,
        *,
        stored: Mapping[str, Any],
        title: str,
        sections: Sequence[Section],
        fields: Mapping[str, Any],
        vector: Sequence[float] | None = None,
        permissions: Permissions | None = None,
    ) -> int:
        """Add or replace a unit and its chunks in one transaction.

        Args:
            key: The unit's key.
            stored: What :meth:`get` returns for it (the document or file description).
            title: The title every chunk carries.
            sections: The unit's text; an empty text still gets one (empty) chunk, so the
                unit is found by filters and browsing.
            fields: Filterable metadata of every chunk (stored once for the unit).
            vector: One vector for every chunk (hybrid search), if any.
            permissions: Who may see the unit (``None``: unmarked, or the permissions it
                already had).

        Returns:
            The number of chunks written.
        """
        chunks = self._chunks(key, title, sections, fields)
        body = json.dumps(stored, sort_keys=True, default=json_default)
        digest = hashlib.sha256(body.encode()).hexdigest()
        path = RECORD_PREFIX + key
        state = FileState(path, path, digest, digest, 0.0, len(body), len(chunks))
        vectors = [list(vector)] * len(chunks) if vector is not None else None
        self.store.replace_file(
            state, MetadataJson(body), chunks, vectors, permissions, fields=fields
        )
        return len(chunks)

    def permissions(self, key: str) -> Permissions | None:
        """Who may see the unit ``key`` (``None``: unmarked or absent)."""
        return self.store.permissions_of(RECORD_PREFIX + key)

    def set_permissions(self, key: str, permissions: Permissions) -> bool:
        """Give the unit ``key`` new permissions; whether anything changed."""
        return self.store.set_permissions(RECORD_PREFIX + key, permissions)

    def get(self, key: str, fields: Sequence[str] | None = None) -> dict[str, Any] | None:
        """The unit stored under ``key`` (only ``fields`` of it, when given)."""
        return self.store.stored_metadata(RECORD_PREFIX + key, fields)

    def delete(self, key: str) -> bool:
        """Remove a unit and its chunks; ``False`` when there was none."""
        path = RECORD_PREFIX + key
        if self.store.file_state(path) is None:
            return False
        self.store.delete_file(path)
        return True

    def count(self) -> int:
        """How many units the store holds."""
        return self.store.count_files(RECORD_PREFIX)

    def page(self, after: str | None, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` (key, unit) pairs in key order, after the key ``after``."""
        start = RECORD_PREFIX + after if after is not None else None
        rows = self.store.files_page(RECORD_PREFIX, start, limit)
        return [(path[len(RECORD_PREFIX) :], unit) for path, unit in rows]

    def search(
        self,
        text: str,
        *,
        top: int,
        skip: int = 0,
        filter_expr: Expr | None = None,
        vector: Sequence[float] | None = None,
        per_unit: bool = True,
        access: Access = ANONYMOUS,
    ) -> list[DocumentHit]:
        """Search the chunks; with ``per_unit``, each unit once (scored by its best chunk).

        Args:
            text: Search text (``*`` or empty: everything, in insertion order).
            top: Most results.
            skip: Results to skip first (paging).
            filter_expr: A parsed OData filter over the chunks' fields.
            vector: A query vector (hybrid search when the store has vectors).
            per_unit: Group chunks by unit (documents); otherwise every chunk is a result.
            access: Who is asking (see :meth:`LocalStore.search`).
        """
        wanted = skip + top
        if top <= 0:
            return []
        depth = max(wanted, 50)
        hits: list[DocumentHit] = []
        for _ in range(_SEARCH_DEPTH_ROUNDS):
            chunks = self.store.search(
                text, top=depth, filter_expr=filter_expr, query_vector=vector, access=access
            )
            hits = _group(chunks) if per_unit else [_hit(c) for c in chunks]
            if len(hits) >= wanted or len(chunks) < depth:
                break
            depth *= 4
        return hits[skip:wanted]

    def count_matches(
        self, text: str, filter_expr: Expr | None = None, *, access: Access = ANONYMOUS
    ) -> int:
        """How many units ``access`` may see match ``text`` and ``filter_expr``."""
        return self.store.count_matching_files(text, filter_expr, access=access)

    def _chunks(
        self, key: str, title: str, sections: Sequence[Section], fields: Mapping[str, Any]
    ) -> list[ChunkRecord]:
        records: list[ChunkRecord] = []
        for section in sections:
            # only what differs per chunk is stored per chunk: ``fields`` are stored once
            own = (
                {"page": section.page} if section.page is not None and "page" not in fields else {}
            )
            for text in chunks_of(section.text, self.chunk_size, self.overlap, section.split):
                records.append(
                    ChunkRecord(
                        f"{key}{CHUNK_SEPARATOR}{len(records)}",
                        len(records),
                        title,
                        text,
                        section.page,
                        own,
                    )
                )
        if not records:
            records.append(ChunkRecord(f"{key}{CHUNK_SEPARATOR}0", 0, title, "", None, {}))
        return records


def unit_key(chunk_id: str) -> str:
    """The key of the unit a chunk id belongs to."""
    return chunk_id.rpartition(CHUNK_SEPARATOR)[0] or chunk_id


def _hit(chunk: StoredHit) -> DocumentHit:
    return DocumentHit(unit_key(chunk.id), chunk.score, chunk)


def _group(chunks: list[StoredHit]) -> list[DocumentHit]:
    best: dict[str, DocumentHit] = {}
    for chunk in chunks:  # best first: the first chunk seen of a unit is its best
        key = unit_key(chunk.id)
        if key not in best:
            best[key] = DocumentHit(key, chunk.score, chunk)
    return list(best.values())
