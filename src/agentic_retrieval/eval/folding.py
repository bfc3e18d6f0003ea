"""Chunks to documents: document metrics judge documents, the pipeline ranks chunks.

A reference's document is, in order: the ``record_id`` of a record chunk; for a chunk of an
indexed file (metadata ``source_path`` and ``chunk``), the chunk id without its ``-<n>``
suffix (the file's slug); otherwise the reference's ``docKey`` itself (in-memory, Azure and
LangChain sources key documents, not chunks). A document ranks where its first chunk ranks.
A graph search's row (``sourceData.row``) is a fact, not a document: it stands for the
documents its evidence was read from (``sourceData.evidence[].parentId``), in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentic_retrieval.wire.models import Reference


def document_key(doc_key: str, source_data: Mapping[str, Any] | None) -> str:
    """The document a chunk belongs to (see the module docstring)."""
    data = source_data or {}
    record = data.get("record_id")
    if record is not None:
        return str(record)
    chunk = data.get("chunk")
    if "source_path" in data and isinstance(chunk, int):
        suffix = f"-{chunk}"
        if doc_key.endswith(suffix):
            return doc_key[: -len(suffix)]
    return doc_key


def fold(references: Iterable[Reference]) -> list[str]:
    """Document keys in rank order, each at its first chunk's rank."""
    documents: dict[str, None] = {}
    for reference in references:
        for key in _documents_of(reference):
            documents.setdefault(key, None)
    return list(documents)


def _documents_of(reference: Reference) -> list[str]:
    data = reference.source_data or {}
    evidence = data.get("evidence")
    if "row" in data and isinstance(evidence, list):
        parents = (e.get("parentId") for e in evidence if isinstance(e, Mapping))
        return [str(p) for p in parents if p is not None]
    if reference.doc_key is None:
        return []
    return [document_key(reference.doc_key, reference.source_data)]
