"""``graph_search``: one subquery against one source's entity graph (a ``Send`` task).

The planning model writes a GQL query for the subquery, retried with its error when it does
not parse, fit the ontology or stay under the cost bound; then, or at minimal effort, the
graph is searched by the entities the subquery names
(:func:`agentic_retrieval.entitygraph.search_graph`). Each result row becomes a hit (its
facts as text, the row and its evidence as ``sourceData``) and, with ``provenance.kind:
hydrate``, so does each source chunk behind the rows. The chunks come through the source's
:meth:`~agentic_retrieval.sources.base.GraphKnowledgeSource.hydrate`, trimmed by permission
like its searches; a row none of whose evidence the caller may see is left out. The hits
then go through ``rerank`` like any other, as ``graphSearch`` references.

Like ``search``, the task never raises: a failing graph becomes an error record and a
partial response.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from agentic_retrieval.context import Context
from agentic_retrieval.entitygraph import CostBound, GraphSearchOutcome, ResultRow, search_graph
from agentic_retrieval.errors import EntityGraphError, ErrorCode, SourceError
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.events import begin
from agentic_retrieval.graph.records import (
    ErrorInfo,
    GraphSearchActivity,
    GraphSearchTask,
)
from agentic_retrieval.nodes._shared import searched_update
from agentic_retrieval.sources.base import GraphKnowledgeSource, Hit, SearchQuery
from agentic_retrieval.state import Update

logger = logging.getLogger(__name__)

QUERY_ATTEMPTS = 3
"""Model calls for one graph query at most before entity matching answers instead."""


async def graph_search(
    task: GraphSearchTask, runtime: Runtime[Context], bindings: Bindings, config: RunnableConfig
) -> Update:
    """Search ``task.source``'s entity graph for ``task.subquery``."""
    source = bindings.sources[task.source]
    key = f"graph:{task.subquery.id}:{task.source}"
    step = begin(runtime, key, GraphSearchActivity, source=source)
    query = SearchQuery(
        text=task.subquery.text,
        identity=runtime.context.identity,
        enforce_permissions=runtime.context.enforce_permissions,
    )
    outcome, hits, error = GraphSearchOutcome(rows=[], outcome="EntityMatchFallback"), [], None
    graph_name = task.source
    try:
        if not isinstance(source, GraphKnowledgeSource):
            message = f"knowledge source '{source.name}' has no graph"
            raise SourceError(ErrorCode.GRAPH_NOT_FOUND, message)
        graph_name = source.entity_graph.graph_name
        outcome = await _search(task, source, bindings, runtime.context, config)
        hits = await _hits(task, source, outcome, query)
    except SourceError as exc:
        error = ErrorInfo.of_source(exc)
    except (EntityGraphError, OSError) as exc:
        logger.error("graph search of %r failed: %s", task.source, exc)
        message = f"the graph of '{task.source}' failed; the server log has the details"
        error = ErrorInfo.of(ErrorCode.GRAPH_SEARCH_ERROR, message)
    record = GraphSearchActivity(
        key=key,
        started=step.started,
        elapsed_ms=step.elapsed_ms(),
        error=error,
        usage=outcome.usage,
        model=outcome.model,
        source=task.source,
        graph_index=graph_name,
        natural_language_query=query.text,
        gql=outcome.gql if task.parameters.include_query else None,
        attempts=outcome.attempts,
        outcome=outcome.outcome,
        count=len(hits),
        model_elapsed_ms=outcome.model_elapsed_ms,
    )
    return searched_update(
        runtime,
        record,
        hits,
        source=task.source,
        subquery_id=task.subquery.id,
        query=query.text,
        error=error,
        graph_index=graph_name,
    )


async def _search(
    task: GraphSearchTask,
    source: GraphKnowledgeSource,
    bindings: Bindings,
    context: Context,
    config: RunnableConfig,
) -> GraphSearchOutcome:
    """The model's query (or entity matching), within the task's time."""
    model = None
    if task.use_model and bindings.models.is_configured("planning", context):
        model = bindings.models.resolve("planning", context)
    left = min(task.timeout, task.deadline - time.time())
    bound = CostBound(max_seconds=max(0.1, min(2.0, left / 4)))
    return await search_graph(
        task.subquery.text,
        source.entity_graph,
        model,
        attempts=QUERY_ATTEMPTS,
        bound=bound,
        config=config,
        timeout=max(0.1, left),
    )


async def _hits(
    task: GraphSearchTask,
    source: GraphKnowledgeSource,
    outcome: GraphSearchOutcome,
    query: SearchQuery,
) -> list[Hit]:
    """The rows whose evidence the caller may see, then (hydrating) the chunks themselves."""
    chunk_ids = list(dict.fromkeys(a.source_chunk_id for r in outcome.rows for a in r.evidence))
    visible = await asyncio.wait_for(
        source.hydrate(chunk_ids, query), max(0.1, task.deadline - time.time())
    )
    seen = {h.doc_key for h in visible}
    rows = [r for r in outcome.rows if _visible(r, seen)]
    hits = [_row_hit(source.entity_graph.graph_name, r, len(rows) - i) for i, r in enumerate(rows)]
    provenance = task.parameters.provenance
    if provenance.kind == "hydrate":
        hydrate = provenance.hydrate_documents
        top = hydrate.top if hydrate else 50
        select = _fields(hydrate.select if hydrate else None)
        for chunk in visible[:top]:
            metadata = {k: v for k, v in chunk.metadata.items() if select is None or k in select}
            hits.append(chunk.model_copy(update={"metadata": metadata, "score": 0.0}))
    return hits


def _visible(row: ResultRow, chunks: set[str]) -> bool:
    """Whether every fact of ``row`` rests on at least one chunk the caller may see."""
    facts: dict[str, bool] = {}
    for a in row.evidence:
        facts[a.fact_id] = facts.get(a.fact_id, False) or a.source_chunk_id in chunks
    return all(facts.values())


def _row_hit(graph_name: str, row: ResultRow, score: float) -> Hit:
    """A result row as a hit: its facts as text, the row and its evidence as metadata."""
    facts = sorted({a.fact_id for a in row.evidence})
    digest = hashlib.sha256(repr((sorted(row.values.items(), key=str), facts)).encode())
    evidence: list[dict[str, Any]] = [
        {
            "edgeId": a.assertion_id,
            "chunkId": a.source_chunk_id,
            "parentId": a.source_parent_id,
            "confidence": a.confidence,
        }
        for a in row.evidence
    ]
    return Hit(
        doc_key=f"{graph_name}:row:{digest.hexdigest()[:16]}",
        content=row.describe(),
        title=None,
        score=score,
        metadata={"row": row.values, "evidence": evidence},
    )


def _fields(select: str | None) -> set[str] | None:
    if not select:
        return None
    return {f.strip() for f in select.split(",") if f.strip()}
