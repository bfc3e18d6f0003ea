"""Run a validated :class:`~agentic_retrieval.entitygraph.gql.GraphQuery` over the edge list.

The pattern is matched from its most selective node (one with a ``name`` or ``id``
equality), outwards hop by hop, one store lookup per hop for the whole frontier. Every row
the store returns counts against :attr:`CostBound.max_rows` and the clock against
:attr:`CostBound.max_seconds`: past either, the query stops with a
:class:`~agentic_retrieval.errors.GraphQueryCostError` rather than scanning on. Each result
row keeps the assertions it was built from (its evidence: chunk and document ids).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentic_retrieval.entitygraph.gql import Condition, EdgePattern, GraphQuery, NodePattern
from agentic_retrieval.entitygraph.ontology import Ontology
from agentic_retrieval.entitygraph.store import Assertion, EdgeStore, Entity, entity_id
from agentic_retrieval.errors import GraphQueryCostError

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


@dataclass(frozen=True)
class CostBound:
    """How much one graph query may cost before it is stopped."""

    max_rows: int = 20_000
    """Assertions and entities read from the store, over every hop."""
    max_seconds: float = 2.0


@dataclass(frozen=True)
class ResultRow:
    """One matched path, projected by ``RETURN``, with the assertions it rests on."""

    values: dict[str, Any]
    evidence: tuple[Assertion, ...]

    def describe(self) -> str:
        """The path as one line of text (what the reranker and the answer model read)."""
        parts = []
        seen: set[str] = set()
        for a in self.evidence:
            if a.fact_id in seen:
                continue
            seen.add(a.fact_id)
            target = a.object_name if a.object_id else a.object_literal
            parts.append(
                f"{a.subject_name} ({a.subject_type}) {a.predicate} {target}"
                + (f" ({a.object_type})" if a.object_type else "")
            )
        return "; ".join(parts)


@dataclass
class QueryResult:
    """The rows of a query and what it cost."""

    rows: list[ResultRow]
    visited: int


_BATCH = 256
"""Paths extended per store lookup (the frontier's ids in one ``IN`` list)."""


@dataclass
class _Path:
    nodes: dict[str, Entity] = field(default_factory=dict)
    edges: dict[str, tuple[Assertion, ...]] = field(default_factory=dict)


_Step = tuple[NodePattern, EdgePattern, NodePattern, bool]
"""One hop of the walk: the bound node, the edge, the node it reaches, and whether forward."""


class _Run:
    def __init__(
        self, query: GraphQuery, ontology: Ontology, store: EdgeStore, graph: str, bound: CostBound
    ) -> None:
        self.query, self.ontology, self.store, self.graph = query, ontology, store, graph
        self.bound = bound
        self.visited = 0
        self.deadline = time.monotonic() + bound.max_seconds
        self.limit = min(query.limit or DEFAULT_LIMIT, MAX_LIMIT)
        self.rows: dict[str, ResultRow] = {}

    def charge(self, rows: int) -> None:
        self.visited += rows
        if self.visited > self.bound.max_rows:
            raise GraphQueryCostError(
                f"the graph query read more than {self.bound.max_rows} rows, its bound; "
                'name a start node ({name: "..."}) or use fewer hops'
            )
        if time.monotonic() > self.deadline:
            raise GraphQueryCostError(
                f"the graph query ran longer than {self.bound.max_seconds:g} s, its bound"
            )

    def budget(self) -> int:
        return self.bound.max_rows - self.visited + 1

    def classes(self, label: str | None) -> list[str] | None:
        if label is None:
            return None
        return [c for c in self.ontology.classes if self.ontology.is_a(c, label)]

    def fits(self, node: NodePattern, entity: Entity) -> bool:
        if node.label is not None and not self.ontology.is_a(entity.type, node.label):
            return False
        values = {"name": entity.name, "id": entity.id, "type": entity.type}
        return all(c.holds(values.get(c.key)) for c in self.query.conditions_on(node.var))

    def start(self, node: NodePattern) -> list[Entity]:
        equal = {c.key: c.value for c in self.query.conditions_on(node.var) if c.op == "="}
        if "id" in equal:
            found = self.store.entities_by_id(self.graph, [equal["id"]])
        elif "name" in equal:
            classes = self.classes(node.label) or list(self.ontology.classes)
            ids = [entity_id(c, equal["name"]) for c in classes]
            found = self.store.entities_by_id(self.graph, ids)
        else:
            found = self.store.entities(self.graph, self.classes(node.label), self.budget())
        self.charge(len(found))
        return [e for e in found if self.fits(node, e)]

    def hop(
        self,
        paths: list[_Path],
        known: NodePattern,
        edge: EdgePattern,
        other: NodePattern,
        forward: bool,
    ) -> list[_Path]:
        """Extend every path across ``edge`` from ``known`` to ``other``."""
        ids = sorted({p.nodes[known.var].id for p in paths})
        # by the known end, then by fact: a fact stated in several chunks is one edge
        found: dict[str, dict[str, tuple[Entity, list[Assertion]]]] = {}
        for direction in _directions(edge.direction, forward):
            rows = self.store.edges(
                self.graph, ids, direction=direction, predicate=edge.label, limit=self.budget()
            )
            self.charge(len(rows))
            for a in rows:
                near, far = _ends(a, direction)
                facts = found.setdefault(near, {})
                facts.setdefault(a.fact_id, (far, []))[1].append(a)
        edge_filters = self.query.conditions_on(edge.var)
        kept = {
            near: [
                (far, tuple(assertions))
                for far, assertions in facts.values()
                if self.fits(other, far)
                and all(c.holds(assertions[0].predicate) for c in edge_filters)
            ]
            for near, facts in found.items()
        }
        extended = []
        for path in paths:
            for far, assertions in kept.get(path.nodes[known.var].id, []):
                if other.var in path.nodes and path.nodes[other.var].id != far.id:
                    continue
                extended.append(
                    _Path({**path.nodes, other.var: far}, {**path.edges, edge.var: assertions})
                )
            if len(extended) > self.bound.max_rows:
                self.charge(len(extended))
        self.charge(0)
        return extended

    def run(self) -> QueryResult:
        nodes, edges = self.query.nodes, self.query.edges
        anchor = _anchor(nodes, self.query.conditions)
        steps = [(nodes[i], edges[i], nodes[i + 1], True) for i in range(anchor, len(edges))]
        steps += [(nodes[i + 1], edges[i], nodes[i], False) for i in range(anchor - 1, -1, -1)]
        self.walk([_Path({nodes[anchor].var: e}) for e in self.start(nodes[anchor])], steps)
        return QueryResult(list(self.rows.values()), self.visited)

    def walk(self, paths: list[_Path], steps: list[_Step]) -> None:
        """Extend ``paths`` along ``steps`` a batch at a time, until ``LIMIT`` rows are found.

        Depth first by batches: a hub's thousands of neighbours are not all expanded when the
        first few hundred already give the rows asked for.
        """
        if not steps:
            self.collect(paths)
            return
        known, edge, other, forward = steps[0]
        for start in range(0, len(paths), _BATCH):
            if len(self.rows) >= self.limit:
                return
            batch = paths[start : start + _BATCH]
            self.walk(self.hop(batch, known, edge, other, forward), steps[1:])

    def collect(self, paths: list[_Path]) -> None:
        """Project complete paths into rows; a repeated row gathers the other's evidence."""
        for path in paths:
            values = {item.alias: _value(path, item.var, item.key) for item in self.query.returns}
            key = repr(sorted(values.items(), key=lambda kv: kv[0]))
            evidence = tuple(a for edge in self.query.edges for a in path.edges[edge.var])
            if key in self.rows:
                merged = self.rows[key].evidence + evidence
                self.rows[key] = ResultRow(values, tuple(dict.fromkeys(merged)))
            elif len(self.rows) < self.limit:
                self.rows[key] = ResultRow(values, evidence)


def execute_query(
    query: GraphQuery,
    ontology: Ontology,
    store: EdgeStore,
    graph_name: str,
    bound: CostBound | None = None,
) -> QueryResult:
    """Match ``query`` (already validated against ``ontology``) in ``graph_name``.

    Raises:
        GraphQueryCostError: It read more rows, or ran longer, than ``bound`` allows.
    """
    return _Run(query, ontology, store, graph_name, bound or CostBound()).run()


def _anchor(nodes: Sequence[NodePattern], conditions: Sequence[Condition]) -> int:
    """The node to start from: the first with a name or id equality, else the first."""
    for index, node in enumerate(nodes):
        if any(c.var == node.var and c.op == "=" and c.key in ("name", "id") for c in conditions):
            return index
    return 0


def _directions(direction: str, forward: bool) -> tuple[str, ...]:
    """Which store lookups extend a path along an edge written ``direction``.

    Going forward, the known node is on the pattern's left: ``->`` finds it as subject.
    """
    if direction == "any":
        return ("out", "in")
    outgoing = direction == "out"
    return ("out",) if outgoing == forward else ("in",)


def _ends(assertion: Assertion, direction: str) -> tuple[str, Entity]:
    """The known end's id and the other end of ``assertion`` read in ``direction``."""
    subject = Entity(assertion.subject_id, assertion.subject_name, assertion.subject_type)
    if direction == "in":
        return assertion.object_id or "", subject
    if assertion.object_id is None:
        value = assertion.object_literal
        return assertion.subject_id, Entity(f"literal:{value}", str(value), "literal")
    obj = Entity(assertion.object_id, assertion.object_name or "", assertion.object_type or "")
    return assertion.subject_id, obj


def _value(path: _Path, var: str, key: str | None) -> Any:
    if var in path.nodes:
        entity = path.nodes[var]
        values = {"id": entity.id, "name": entity.name, "type": entity.type}
        return values[key] if key else values
    first = path.edges[var][0]
    values = {"predicate": first.predicate, "factId": first.fact_id}
    return values.get(key or "", first.predicate) if key else values
