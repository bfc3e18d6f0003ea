"""The on-disk index of one local knowledge source: a SQLite file and its lexical index.

One module per concern: :mod:`.schema` (tables, migrations), :mod:`.connections`
(connections, leases, the writer lock, transactions), :mod:`.lexical` (query terms),
:mod:`.lexical_index` (the tantivy index beside the file, its outbox, rebuilds),
:mod:`.vectors` and :mod:`.ann` (dense search, exact or HNSW), :mod:`.filters` (OData
filters as SQL), :mod:`.permissions` (permission rows and trimming), :mod:`.search` and
:mod:`.fusion` (reading ranked hits back, reciprocal rank fusion), and :mod:`.local_store`,
the :class:`LocalStore` that ties them together.
"""

from agentic_retrieval.sources.local.store.filters import metadata_column
from agentic_retrieval.sources.local.store.fusion import RRF_K, reciprocal_rank_fusion
from agentic_retrieval.sources.local.store.lexical import (
    QUERY_STOPWORDS,
    fts_match_expression,
    fts_segment,
    query_terms,
)
from agentic_retrieval.sources.local.store.lexical_index import lexical_directory
from agentic_retrieval.sources.local.store.local_store import LocalStore
from agentic_retrieval.sources.local.store.permissions import PUBLIC, RESTRICTED, AccessSummary
from agentic_retrieval.sources.local.store.rows import (
    RECORD_PREFIX,
    ChunkRecord,
    FileState,
    MetadataJson,
    StoredHit,
    json_default,
)
from agentic_retrieval.sources.local.store.schema import SCHEMA as _SCHEMA
from agentic_retrieval.sources.local.store.schema import SCHEMA_VERSION
from agentic_retrieval.sources.local.store.topics import TopicIndexState
from agentic_retrieval.sources.local.store.vectors import VECTOR_FILE_SUFFIX

__all__ = [
    "PUBLIC",
    "QUERY_STOPWORDS",
    "RECORD_PREFIX",
    "RESTRICTED",
    "RRF_K",
    "SCHEMA_VERSION",
    "VECTOR_FILE_SUFFIX",
    "_SCHEMA",
    "AccessSummary",
    "ChunkRecord",
    "FileState",
    "LocalStore",
    "MetadataJson",
    "StoredHit",
    "TopicIndexState",
    "fts_match_expression",
    "fts_segment",
    "json_default",
    "lexical_directory",
    "metadata_column",
    "query_terms",
    "reciprocal_rank_fusion",
]
