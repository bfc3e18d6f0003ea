"""Graph search: the planning model writes a GQL query; entity matching when it cannot.

:func:`search_graph` asks the model for a query (:class:`GraphQueryPlan`), parses, validates
and runs it; a reply that is not the schema, a query that does not parse or fit the ontology,
or one over its cost bound is an attempt that failed, and the next attempt shows the model
the error. After :attr:`attempts` failures, or without a model, the graph is searched by the
entities the question names (:meth:`EntityGraph.match_entities`). Nothing here raises for a
bad query or a failing model: the outcome says what happened, so a retrieve never fails
because of the graph.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, Field

from agentic_retrieval.entitygraph.execute import CostBound, ResultRow
from agentic_retrieval.entitygraph.graph import EntityGraph
from agentic_retrieval.errors import GraphQueryError
from agentic_retrieval.llm.chat_models import ModelIdentity, Usage, structured_call
from agentic_retrieval.llm.prompts import GRAPH_QUERY_PROMPT

logger = logging.getLogger(__name__)

Outcome = Literal["Success", "EntityMatchFallback"]
"""``Success``: a model-written query ran; ``EntityMatchFallback``: entity matching answered."""


class GraphQueryPlan(BaseModel):
    """The planning model's graph query."""

    gql: str = Field(description="One query in the GQL subset described above")


@dataclass
class GraphSearchOutcome:
    """What one graph search found and what it took."""

    rows: list[ResultRow]
    outcome: Outcome
    attempts: int = 0
    """Model calls made for a query (0: no model)."""
    gql: str | None = None
    """The query that ran (``None`` when entity matching answered)."""
    errors: list[str] = field(default_factory=list)
    """Why each failed attempt failed, in order."""
    usage: Usage = field(default_factory=Usage)
    model: ModelIdentity | None = None
    model_elapsed_ms: int = 0


async def search_graph(
    question: str,
    graph: EntityGraph,
    model: BaseChatModel | None,
    *,
    attempts: int = 3,
    bound: CostBound | None = None,
    config: RunnableConfig | None = None,
    timeout: float | None = None,
) -> GraphSearchOutcome:
    """Search ``graph`` for what ``question`` needs (see the module docstring)."""
    outcome = GraphSearchOutcome(rows=[], outcome="EntityMatchFallback")
    system = SystemMessage(GRAPH_QUERY_PROMPT.format(ontology=graph.ontology.describe()))
    for _ in range(attempts if model is not None else 0):
        assert model is not None
        prompt = f"Question: {question}"
        if outcome.errors:
            prompt += (
                f"\n\nYour previous query failed: {outcome.errors[-1]}\nWrite a corrected one."
            )
        started = time.monotonic()
        reply = await structured_call(
            model,
            GraphQueryPlan,
            [system, HumanMessage(prompt)],
            config=config,
            timeout=timeout,
            attempts=1,
        )
        outcome.model_elapsed_ms += round((time.monotonic() - started) * 1000)
        outcome.attempts += 1
        outcome.usage += reply.usage
        outcome.model = reply.model
        if reply.value is None:
            outcome.errors.append(reply.error or "the model wrote no query")
            continue
        try:
            result = graph.query(reply.value.gql, bound)
        except GraphQueryError as exc:
            logger.info("graph query refused: %s", exc)
            outcome.errors.append(str(exc))
            continue
        outcome.rows, outcome.gql, outcome.outcome = result.rows, reply.value.gql, "Success"
        return outcome
    outcome.rows = graph.match_entities(question)
    return outcome
