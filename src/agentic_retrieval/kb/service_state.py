"""What the knowledge service keeps, whatever keeps it: the :class:`ServiceState` protocol.

Two implementations: :class:`~agentic_retrieval.kb.service.ServiceDirectory` (``serve --data
DIR``: SQLite and embedded store files in DIR) and
:class:`~agentic_retrieval.kb.postgres_service.PostgresServiceDirectory` (``serve --data DIR
--store postgresql://...``: everything in one PostgreSQL database that any number of replicas
share; DIR holds caches and locks only). The catalog, the management operations and the REST
routes are written against this protocol, so they run over either unchanged.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from agentic_retrieval.kb.service import (
    Check,
    Conditions,
    DefinitionKind,
    IngestionHistory,
    RunRecorder,
    StoredDefinition,
)

if TYPE_CHECKING:
    from agentic_retrieval.sources.local.documents import DocumentBackend

__all__ = ["ServiceState", "open_service"]


class ServiceState(Protocol):
    """Definitions with ETags and a generation, their document stores, ingestion history."""

    path: Path
    """The local directory: caches and locks (and, for the embedded kind, everything)."""

    def generation(self) -> int:
        """The counter bumped by every committed definition change (any process)."""
        ...

    def get(self, kind: DefinitionKind, name: str) -> StoredDefinition | None:
        """The definition ``kind``/``name``, if it exists."""
        ...

    def definitions(self, kind: DefinitionKind) -> list[StoredDefinition]:
        """Every definition of ``kind``, sorted by name."""
        ...

    def put(
        self,
        kind: DefinitionKind,
        name: str,
        body: dict[str, Any],
        *,
        conditions: Conditions | None = None,
        check: Check | None = None,
        with_store: bool = False,
    ) -> tuple[StoredDefinition, bool]:
        """Create or replace a definition in one transaction; (stored, created)."""
        ...

    def delete(
        self,
        kind: DefinitionKind,
        name: str,
        *,
        conditions: Conditions | None = None,
        check: Check | None = None,
    ) -> StoredDefinition | None:
        """Delete a definition (and its store) in one transaction."""
        ...

    def store(self, definition: StoredDefinition) -> DocumentBackend:
        """The document store of an index or file source (opened once per process)."""
        ...

    def close_unused_stores(self) -> None:
        """Forget this process's stores whose definitions are gone."""
        ...

    def remove_orphans(self) -> list[str]:
        """Delete stores no definition names; their names."""
        ...

    def close(self) -> None:
        """Close every connection and store this object opened."""
        ...

    def record_status(self, store: str, key: str, body: dict[str, Any]) -> None:
        """Keep ``body`` as ``store``'s ``key`` status, for every process."""
        ...

    def status(self, store: str, key: str) -> dict[str, Any] | None:
        """``store``'s ``key`` status as any process last recorded it."""
        ...

    def ingestion_run(self, store: str) -> AbstractContextManager[RunRecorder]:
        """Record one ingestion run of ``store``: in progress while the block runs."""
        ...

    def ingestion(self, store: str) -> IngestionHistory:
        """The ingestion history of ``store``."""
        ...

    def reconcile_ingestion(self) -> list[str]:
        """Record every run whose process died as interrupted; their stores."""
        ...


def open_service(data: Path, store_url: str | None = None) -> ServiceState:
    """The service state of ``serve --data DIR`` (``--store URL``: kept in PostgreSQL).

    Raises:
        StoreError: A URL that is not a valid PostgreSQL URL, or a database that cannot be
            reached or was migrated by a newer version (one line, no password).
        OSError: ``data`` cannot be created.
    """
    if store_url is None:
        from agentic_retrieval.kb.service import ServiceDirectory

        return ServiceDirectory(data)
    from agentic_retrieval.kb.postgres_service import PostgresServiceDirectory

    return PostgresServiceDirectory(data, store_url)
