"""What ingestion writes into: the embedded store, or any store with the same methods.

Indexing files, folders and records (:mod:`~agentic_retrieval.sources.local.ingest`,
:mod:`~agentic_retrieval.sources.local.record_ingest`) needs only these operations, so the
PostgreSQL store (:mod:`agentic_retrieval.sources.postgres`) is filled by the same code, with
the same incremental checks, slugs, permissions and batching.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.local.store.rows import ChunkRecord, FileState, MetadataJson


class IndexTarget(Protocol):
    """The store operations ingestion uses (see :class:`LocalStore` for each one's contract)."""

    @property
    def label(self) -> str:
        """What to call the store in logs."""
        ...

    def exclusive_writer(self) -> AbstractContextManager[None]:
        """One indexing run at a time (raises ``StoreBusyError`` otherwise)."""
        ...

    def transaction(self) -> AbstractContextManager[Any]:
        """Several writes committed together, each all-or-nothing."""
        ...

    def file_state(self, path: str) -> FileState | None:
        """What was indexed for ``path``."""
        ...

    def indexed_paths(self) -> list[str]:
        """Every indexed path, sorted."""
        ...

    def record_ids(self, origin: str | None = None) -> list[str]:
        """Ids of the indexed records, sorted."""
        ...

    def count_chunks(self) -> int:
        """The number of chunks."""
        ...

    def count_files(self, prefix: str = "") -> int:
        """How many indexed paths start with ``prefix``."""
        ...

    def slug_owner(self, slug: str) -> str | None:
        """The path whose chunks use ``slug``."""
        ...

    def replace_file(
        self,
        state: FileState,
        metadata: Mapping[str, Any] | MetadataJson,
        chunks: Sequence[ChunkRecord],
        vectors: Sequence[Sequence[float]] | None = None,
        permissions: Permissions | None = None,
        *,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        """Replace everything indexed for ``state.path`` in one transaction."""
        ...

    def permissions_of(self, path: str) -> Permissions | None:
        """Who may see ``path``."""
        ...

    def set_permissions(self, path: str, permissions: Permissions) -> bool:
        """Give ``path`` new permissions."""
        ...

    def touch_file(self, path: str, mtime: float) -> None:
        """Record a new mtime for an unchanged file."""
        ...

    def delete_file(self, path: str) -> int:
        """Remove a file and its chunks."""
        ...
