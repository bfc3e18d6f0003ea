"""An entity graph: an ontology, a graph name and the edge list that holds its assertions.

Two ways to read it: :meth:`EntityGraph.query` runs a GQL query (parsed, validated against
the ontology, executed within a cost bound), and :meth:`EntityGraph.match_entities` finds the
entities a question names (any run of its words that is an entity's name or alias in some
class) and the facts around them, with no model at all: the graph search's fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentic_retrieval.entitygraph.execute import CostBound, QueryResult, ResultRow, execute_query
from agentic_retrieval.entitygraph.gql import parse_query, validate_query
from agentic_retrieval.entitygraph.ontology import Ontology
from agentic_retrieval.entitygraph.store import EdgeStore, entity_id

MAX_NAME_WORDS = 6
"""Longest entity name (in words) entity matching looks for in a question."""


@dataclass
class EntityGraph:
    """One graph of an edge list, read through its ontology."""

    ontology: Ontology
    store: EdgeStore
    graph_name: str

    def query(self, text: str, bound: CostBound | None = None) -> QueryResult:
        """Parse, validate and run ``text``.

        Raises:
            GraphQueryError: It does not parse or does not fit the ontology.
            GraphQueryCostError: It costs more than ``bound``.
        """
        query = parse_query(text)
        validate_query(query, self.ontology)
        return execute_query(query, self.ontology, self.store, self.graph_name, bound)

    def match_entities(self, question: str, limit: int = 20) -> list[ResultRow]:
        """The facts around the entities ``question`` names: theirs first, then neighbours'.

        One row per fact of a matched entity (either direction), then, while under
        ``limit``, per fact of the entities those facts reach.
        """
        words = re.findall(r"\w+", question)
        spans = {
            " ".join(words[i : i + n])
            for n in range(1, MAX_NAME_WORDS + 1)
            for i in range(len(words) - n + 1)
        }
        ids = sorted({entity_id(c, span) for c in self.ontology.classes for span in spans})
        matched = [e.id for e in self.store.entities_by_id(self.graph_name, ids)]
        rows: dict[str, ResultRow] = {}
        frontier, seen = matched, set(matched)
        for _ in range(2):  # the entities' own facts, then their neighbours'
            if not frontier or len(rows) >= limit:
                break
            reached: list[str] = []
            for direction in ("out", "in"):
                for a in self.store.edges(
                    self.graph_name, frontier, direction=direction, predicate=None, limit=limit
                ):
                    if a.fact_id not in rows and len(rows) < limit:
                        rows[a.fact_id] = ResultRow(
                            {
                                "subject": a.subject_name,
                                "predicate": a.predicate,
                                "object": a.object_name if a.object_id else a.object_literal,
                            },
                            (a,),
                        )
                    for end in (a.subject_id, a.object_id):
                        if end and end not in seen:
                            seen.add(end)
                            reached.append(end)
            frontier = reached
        return list(rows.values())
