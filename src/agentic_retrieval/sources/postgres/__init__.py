"""Knowledge sources on PostgreSQL (the ``postgres`` extra).

The embedded store's contract on a database many processes and hosts share, with BM25 in SQL
and pgvector HNSW for vectors.
"""

from agentic_retrieval.sources.postgres.connections import Database, is_postgres_url
from agentic_retrieval.sources.postgres.source import PostgresKnowledgeSource
from agentic_retrieval.sources.postgres.store import PostgresStore

__all__ = ["Database", "PostgresKnowledgeSource", "PostgresStore", "is_postgres_url"]
