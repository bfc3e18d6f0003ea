"""Entity graphs: an ontology, triples extracted from chunks, an edge list, graph queries.

- :mod:`.ontology` reads an inline JSON-LD ontology (:func:`parse_ontology`).
- :mod:`.extraction` reads chunks into assertions with a chat model (:class:`GraphExtractor`,
  :func:`sync_document`).
- :mod:`.store` keeps the assertions with their provenance (:class:`EdgeStore`).
- :mod:`.gql` parses and validates the GQL subset; :mod:`.execute` runs it within a cost bound.
- :mod:`.graph` binds them (:class:`EntityGraph`); :mod:`.search` lets the planning model
  write the query, falling back to entity matching (:func:`search_graph`).
"""

from agentic_retrieval.entitygraph.execute import CostBound, QueryResult, ResultRow
from agentic_retrieval.entitygraph.extraction import (
    Chunk,
    ChunkFailure,
    ExtractionLimits,
    ExtractionReport,
    GraphExtractor,
    sync_document,
)
from agentic_retrieval.entitygraph.gql import GraphQuery, parse_query, validate_query
from agentic_retrieval.entitygraph.graph import EntityGraph
from agentic_retrieval.entitygraph.ontology import Ontology, parse_ontology
from agentic_retrieval.entitygraph.search import GraphSearchOutcome, search_graph
from agentic_retrieval.entitygraph.store import Assertion, EdgeStore, Entity, entity_id

__all__ = [
    "Assertion",
    "Chunk",
    "ChunkFailure",
    "CostBound",
    "EdgeStore",
    "Entity",
    "EntityGraph",
    "ExtractionLimits",
    "ExtractionReport",
    "GraphExtractor",
    "GraphQuery",
    "GraphSearchOutcome",
    "Ontology",
    "QueryResult",
    "ResultRow",
    "entity_id",
    "parse_ontology",
    "parse_query",
    "search_graph",
    "sync_document",
    "validate_query",
]
