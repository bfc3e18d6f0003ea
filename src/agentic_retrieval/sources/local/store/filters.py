"""OData filters as SQL conditions on a chunk, reading each field where it is stored."""

from __future__ import annotations

import sqlite3
from typing import Any

from agentic_retrieval.odata import Expr, to_sql

FieldLevels = tuple[frozenset[str], frozenset[str]]
"""Names of the fields stored per chunk and per file (document)."""


def metadata_column(path: str, level: str = "chunk") -> str:
    """Map an OData field path (already validated as ``ident(/ident)*``) to SQL.

    ``level`` says where the field is stored: ``chunk`` (the chunk's ``c.metadata``),
    ``document`` (the shared ``f.fields`` of its file) or ``both`` (the chunk's value when
    it has one).
    """
    json_path = "'$." + path.replace("/", ".") + "'"
    chunk, document = (
        f"json_extract(c.metadata, {json_path})",
        f"json_extract(f.fields, {json_path})",
    )
    return {"chunk": chunk, "document": document}.get(level, f"coalesce({chunk}, {document})")


def read_field_levels(conn: sqlite3.Connection) -> FieldLevels:
    """Names of the fields recorded for chunks and for documents (files)."""
    chunk = frozenset(r[0] for r in conn.execute("SELECT DISTINCT name FROM fields"))
    document = frozenset(r[0] for r in conn.execute("SELECT DISTINCT name FROM document_fields"))
    return chunk, document


def filter_sql(filter_expr: Expr, levels: FieldLevels) -> tuple[str, list[Any]]:
    """A filter as a condition on ``c``, reading each field where it is stored.

    A filter on fields its files share only (``files.fields``) is evaluated once per
    file, not once per chunk: a long document's many chunks never re-read its fields.
    """
    chunk_level, document_level = levels
    used: set[str] = set()

    def column(path: str) -> str:
        head = path.split("/")[0]
        shared, own = head in document_level, head in chunk_level or head not in document_level
        level = "both" if shared and own else "document" if shared else "chunk"
        used.update(("chunk", "document") if level == "both" else (level,))
        return metadata_column(path, level)

    sql, values = to_sql(filter_expr, column)
    if "document" not in used:
        return f"({sql})", values
    if "chunk" not in used:  # an uncorrelated subquery: SQLite runs it once
        return f"(c.file_id IN (SELECT f.id FROM files f WHERE {sql}))", values
    return f"(EXISTS (SELECT 1 FROM files f WHERE f.id = c.file_id AND ({sql})))", values
