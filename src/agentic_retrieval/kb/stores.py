"""Where a knowledge-base source's index lives, and the checks an opened index passes.

A source's manifest entry names its ``database``: a SQLite file inside the directory
(``handbook.sqlite``), or a store in PostgreSQL, ``postgresql://user@host:port/db#store``
(the fragment names the store in that database; the password comes from ``PGPASSWORD`` or
``~/.pgpass`` as libpq reads them, so the manifest need not hold it). A PostgreSQL source
needs the ``postgres`` extra; the directory, the graph, ``retrieve`` and ``eval`` use it as
they use a file.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from langchain_core.embeddings import Embeddings

from agentic_retrieval.embeddings import vectors_made_with
from agentic_retrieval.errors import KnowledgeBaseDirectoryError, StoreError
from agentic_retrieval.sources.local import LocalKnowledgeSource

if TYPE_CHECKING:
    from agentic_retrieval.kb.directory import SourceEntry
    from agentic_retrieval.sources.postgres import PostgresKnowledgeSource

    OpenedSource = LocalKnowledgeSource | PostgresKnowledgeSource
    """A source a knowledge-base directory opens: a file's, or a PostgreSQL store's."""


URL_SCHEMES = ("postgresql://", "postgres://")
logger = logging.getLogger(__name__)


def is_database_url(database: str) -> bool:
    """Whether a manifest's ``database`` names a PostgreSQL store rather than a file."""
    return database.startswith(URL_SCHEMES)


def postgres_database(url: str, kb_name: str, source: str) -> str:
    """The ``database`` of a new source kept in PostgreSQL at ``url`` (its store named).

    Raises:
        KnowledgeBaseDirectoryError: ``url`` is not a PostgreSQL URL or holds a fragment.
    """
    if not is_database_url(url) or "#" in url:
        raise KnowledgeBaseDirectoryError(
            f"--database expects postgresql://user@host:port/dbname, not {url!r}"
        )
    return f"{url}#{kb_name}-{source}"


def new_database(url: str | None, kb_name: str, source: str) -> str:
    """The ``database`` of a new source: ``<source>.sqlite``, or its store at ``url``.

    Raises:
        KnowledgeBaseDirectoryError: ``url`` is not a PostgreSQL URL or holds a fragment.
    """
    return postgres_database(url, kb_name, source) if url else f"{source}.sqlite"


def _postgres() -> type[PostgresKnowledgeSource]:
    try:
        from agentic_retrieval.sources.postgres import PostgresKnowledgeSource
    except ImportError:
        raise KnowledgeBaseDirectoryError(
            "this source is kept in PostgreSQL: install the postgres extra "
            "(pip install 'agentic-retrieval[postgres]')"
        ) from None
    return PostgresKnowledgeSource


def open_postgres_source(
    entry: SourceEntry, embeddings: Embeddings | None, *, create: bool
) -> PostgresKnowledgeSource:
    """Open (``create``: or create) the PostgreSQL store of ``entry``.

    Raises:
        KnowledgeBaseDirectoryError: The extra is missing, the URL is invalid, the database
            cannot be reached or holds no such store (one line, no password).
    """
    url, _, store = entry.database.partition("#")
    try:
        return _postgres()(
            entry.name,
            url,
            store=store or entry.name,
            description=entry.description,
            embeddings=embeddings,
            create=create,
        )
    except StoreError as exc:
        raise KnowledgeBaseDirectoryError(f"source {entry.name!r}: {exc}") from None


def drop_postgres_store(entry: SourceEntry) -> None:
    """Delete the PostgreSQL store of ``entry`` (nothing when it is already gone)."""
    try:
        source = open_postgres_source(entry, None, create=False)
    except KnowledgeBaseDirectoryError as exc:
        logger.warning("could not delete the store of source %r: %s", entry.name, exc)
        return
    try:
        source.store.drop()
    finally:
        source.close()


def note_precision(entry: SourceEntry, embeddings: Embeddings) -> None:
    """Say (in the log) when queries are embedded otherwise than the index's vectors were.

    bf16 and fp32 vectors of one model were measured equivalent (cosine 0.99997 at worst,
    nDCG@10 within 0.001), int8 ones close enough to mix (cosine 0.998 at worst, nDCG@10
    within 0.005 either way round), so this is information, never a refusal.
    """
    made_with = vectors_made_with(embeddings)
    if entry.vectors_made_with and made_with and made_with not in entry.vectors_made_with:
        logger.info(
            "source %r holds vectors made with %s; its queries are embedded with %s "
            "(equivalent: see benchmarks/README.md, 'Embedding precision')",
            entry.name,
            ", ".join(entry.vectors_made_with),
            made_with,
        )


def check_dimension(entry: SourceEntry, source: OpenedSource) -> None:
    """Refuse an index whose vectors' dimension differs from the manifest's record.

    Raises:
        KnowledgeBaseDirectoryError: They differ (the index was replaced or corrupted).
    """
    stored = source.store.dimension()
    recorded = entry.embedding_dimension
    if stored is not None and recorded is not None and stored != recorded:
        source.close()
        raise KnowledgeBaseDirectoryError(
            f"source {entry.name!r}: its index holds {stored}-dimensional vectors but the "
            f"manifest records {recorded} for {entry.embedding_model!r}; the index was "
            "replaced or corrupted: index the source again"
        )
