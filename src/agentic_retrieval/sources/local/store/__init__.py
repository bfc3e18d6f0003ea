"""The on-disk index of one local knowledge source: a single SQLite file.

One module per concern: :mod:`.schema` (tables, migrations), :mod:`.connections`
(connections, leases, the writer lock, transactions), :mod:`.lexical` (query terms and the
BM25 candidate query), :mod:`.vectors` (dense search), :mod:`.filters` (OData filters as SQL),
:mod:`.permissions` (permission rows and trimming), :mod:`.search` and :mod:`.fusion`
(reading ranked hits back, reciprocal rank fusion), and :mod:`.local_store`, the
:class:`LocalStore` that ties them together.
"""

from agentic_retrieval.sources.local.store.filters import metadata_column
from agentic_retrieval.sources.local.store.fusion import RRF_K, reciprocal_rank_fusion
from agentic_retrieval.sources.local.store.lexical import (
    CONTENT_WEIGHT,
    QUERY_STOPWORDS,
    SELECTIVE_MAX_SHARE,
    SELECTIVE_MIN_CHUNKS,
    TITLE_WEIGHT,
    fts_match_expression,
    fts_segment,
)
from agentic_retrieval.sources.local.store.local_store import LocalStore
from agentic_retrieval.sources.local.store.permissions import PUBLIC, RESTRICTED, AccessSummary
from agentic_retrieval.sources.local.store.rows import (
    RECORD_PREFIX,
    ChunkRecord,
    FileState,
    StoredHit,
    json_default,
)
from agentic_retrieval.sources.local.store.schema import SCHEMA as _SCHEMA
from agentic_retrieval.sources.local.store.schema import SCHEMA_VERSION

__all__ = [
    "CONTENT_WEIGHT",
    "PUBLIC",
    "QUERY_STOPWORDS",
    "RECORD_PREFIX",
    "RESTRICTED",
    "RRF_K",
    "SCHEMA_VERSION",
    "SELECTIVE_MAX_SHARE",
    "SELECTIVE_MIN_CHUNKS",
    "TITLE_WEIGHT",
    "_SCHEMA",
    "AccessSummary",
    "ChunkRecord",
    "FileState",
    "LocalStore",
    "StoredHit",
    "fts_match_expression",
    "fts_segment",
    "json_default",
    "metadata_column",
    "reciprocal_rank_fusion",
]
