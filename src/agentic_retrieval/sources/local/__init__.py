"""The embedded default knowledge store: SQLite FTS5 (+ optional vectors), no server to run."""

from agentic_retrieval.errors import StoreError, StoreNotFoundError
from agentic_retrieval.sources.local.ingest import (
    FileFailure,
    IndexProgress,
    IndexReport,
    ProgressCallback,
    index_paths,
)
from agentic_retrieval.sources.local.source import LocalKnowledgeSource
from agentic_retrieval.sources.local.store import LocalStore

__all__ = [
    "FileFailure",
    "IndexProgress",
    "IndexReport",
    "LocalKnowledgeSource",
    "LocalStore",
    "ProgressCallback",
    "StoreError",
    "StoreNotFoundError",
    "index_paths",
]
