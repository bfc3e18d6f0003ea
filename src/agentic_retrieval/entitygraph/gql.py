"""The graph query language: a documented subset of GQL (ISO/IEC 39075), parsed and validated.

One linear path pattern of 1-3 edges, filters, a projection and a limit::

    MATCH (a:Organization {name: "Acme"})-[:acquired]->(b:Organization)-[:locatedIn]->(c)
    WHERE c.name CONTAINS "Nor" AND b.type <> "Person"
    RETURN a.name, b.name AS company, c.name
    LIMIT 10

- A node is ``(var:Class {key: "value", ...})``; every part is optional. A label is a class
  of the ontology (its subclasses match too); ``{...}`` is equality, like ``WHERE``.
- An edge is ``-[var:property]->``, ``<-[var:property]-`` or ``-[var:property]-`` (either
  direction); the property is an object or datatype property of the ontology. Node labels
  must fit the property's domain and range. After a datatype property the node is the value.
- Node keys: ``name``, ``id``, ``type``. Edge keys: ``predicate``. Filters compare a key with
  a string by ``=``, ``<>`` or ``CONTAINS`` (case-insensitive), joined by ``AND``.
- ``RETURN`` lists variables or ``var.key`` items, each optionally ``AS alias``; ``LIMIT n``.
Keywords are case-insensitive. Anything else is a :class:`~agentic_retrieval.errors
.GraphQueryError` naming what and where.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from agentic_retrieval.entitygraph.ontology import Ontology
from agentic_retrieval.errors import GraphQueryError

MAX_HOPS = 3
NODE_KEYS = frozenset({"name", "id", "type"})
EDGE_KEYS = frozenset({"predicate"})
Operator = Literal["=", "<>", "CONTAINS"]
Direction = Literal["out", "in", "any"]


@dataclass(frozen=True)
class Condition:
    """``var.key <op> value``."""

    var: str
    key: str
    op: Operator
    value: str

    def holds(self, actual: str | None) -> bool:
        """Whether ``actual`` (the bound value of ``var.key``) passes (case-insensitive)."""
        have, want = (actual or "").casefold(), self.value.casefold()
        if self.op == "=":
            return have == want
        if self.op == "<>":
            return have != want
        return want in have


@dataclass(frozen=True)
class NodePattern:
    """``(var:Class {props})``."""

    var: str
    label: str | None = None


@dataclass(frozen=True)
class EdgePattern:
    """``-[var:property]->`` and its direction."""

    var: str
    label: str | None
    direction: Direction


@dataclass(frozen=True)
class ReturnItem:
    """``var`` or ``var.key``, named ``alias`` in the rows."""

    var: str
    key: str | None
    alias: str


@dataclass(frozen=True)
class GraphQuery:
    """A parsed query: ``nodes[i] -edges[i]- nodes[i+1]``."""

    nodes: tuple[NodePattern, ...]
    edges: tuple[EdgePattern, ...]
    conditions: tuple[Condition, ...] = ()
    returns: tuple[ReturnItem, ...] = ()
    limit: int | None = None
    text: str = field(default="", compare=False)

    def conditions_on(self, var: str) -> list[Condition]:
        """The filters on ``var``."""
        return [c for c in self.conditions if c.var == var]


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<number>\d+)
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<punct><>|<-|->|[()\[\]{}:,.=-])
    )""",
    re.VERBOSE,
)
_KEYWORDS = {"MATCH", "WHERE", "RETURN", "LIMIT", "AND", "AS", "CONTAINS"}


@dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    position: int


def _tokens(text: str) -> list[_Token]:
    tokens, position = [], 0
    while position < len(text):
        if text[position:].strip() == "":
            break
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            start = len(text[position:]) - len(text[position:].lstrip()) + position
            raise GraphQueryError(f"unexpected character {text[start]!r}", start)
        kind = match.lastgroup or ""
        value = match.group(kind)
        start = match.start(kind)
        if kind == "string":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        elif kind == "word" and value.upper() in _KEYWORDS:
            kind, value = "keyword", value.upper()
        tokens.append(_Token(kind, value, start))
        position = match.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.at = 0
        self.conditions: list[Condition] = []
        self.anonymous = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.at]

    def fail(self, expected: str) -> GraphQueryError:
        found = self.token.text or "the end of the query"
        return GraphQueryError(f"expected {expected}, found {found!r}", self.token.position)

    def accept(self, kind: str, text: str | None = None) -> _Token | None:
        token = self.token
        if token.kind == kind and (text is None or token.text == text):
            self.at += 1
            return token
        return None

    def expect(self, kind: str, text: str | None = None, what: str | None = None) -> _Token:
        token = self.accept(kind, text)
        if token is None:
            raise self.fail(what or repr(text or kind))
        return token

    def fresh(self, prefix: str) -> str:
        self.anonymous += 1
        return f"_{prefix}{self.anonymous}"

    def query(self) -> GraphQuery:
        self.expect("keyword", "MATCH", "MATCH")
        nodes, edges = [self.node()], []
        while self.token.text in ("-", "<-"):
            edges.append(self.edge())
            nodes.append(self.node())
        if not edges:
            raise self.fail("an edge pattern such as -[:property]->")
        if len(edges) > MAX_HOPS:
            raise GraphQueryError(f"a pattern has at most {MAX_HOPS} edges, not {len(edges)}")
        if self.accept("keyword", "WHERE"):
            self.condition()
            while self.accept("keyword", "AND"):
                self.condition()
        self.expect("keyword", "RETURN", "RETURN")
        returns = [self.return_item()]
        while self.accept("punct", ","):
            returns.append(self.return_item())
        limit = None
        if self.accept("keyword", "LIMIT"):
            limit = int(self.expect("number", what="a number after LIMIT").text)
        if self.token.kind != "end":
            raise self.fail("the end of the query")
        return GraphQuery(
            tuple(nodes), tuple(edges), tuple(self.conditions), tuple(returns), limit, self.text
        )

    def node(self) -> NodePattern:
        self.expect("punct", "(", "'(' starting a node pattern")
        var_token = self.accept("word")
        var = var_token.text if var_token else self.fresh("n")
        label = self.expect("word", what="a class name").text if self.accept("punct", ":") else None
        if self.accept("punct", "{"):
            self.properties(var)
        self.expect("punct", ")", "')' closing the node pattern")
        return NodePattern(var, label)

    def properties(self, var: str) -> None:
        while True:
            key = self.expect("word", what="a property name").text
            self.expect("punct", ":", "':'")
            value = self.expect("string", what="a quoted string").text
            self.conditions.append(Condition(var, key, "=", value))
            if not self.accept("punct", ","):
                break
        self.expect("punct", "}", "'}'")

    def edge(self) -> EdgePattern:
        incoming = bool(self.accept("punct", "<-"))
        if not incoming:
            self.expect("punct", "-", "'-'")
        self.expect("punct", "[", "'[' starting an edge pattern")
        var_token = self.accept("word")
        var = var_token.text if var_token else self.fresh("e")
        label = (
            self.expect("word", what="a property name").text if self.accept("punct", ":") else None
        )
        self.expect("punct", "]", "']' closing the edge pattern")
        if incoming:
            self.expect("punct", "-", "'-' after an incoming edge")
            return EdgePattern(var, label, "in")
        if self.accept("punct", "->"):
            return EdgePattern(var, label, "out")
        self.expect("punct", "-", "'->' or '-'")
        return EdgePattern(var, label, "any")

    def condition(self) -> None:
        var = self.expect("word", what="a variable").text
        self.expect("punct", ".", "'.' and a property name")
        key = self.expect("word", what="a property name").text
        op: Operator
        if self.accept("punct", "="):
            op = "="
        elif self.accept("punct", "<>"):
            op = "<>"
        elif self.accept("keyword", "CONTAINS"):
            op = "CONTAINS"
        else:
            raise self.fail("'=', '<>' or CONTAINS")
        value = self.expect("string", what="a quoted string").text
        self.conditions.append(Condition(var, key, op, value))

    def return_item(self) -> ReturnItem:
        var = self.expect("word", what="a variable to return").text
        key = (
            self.expect("word", what="a property name").text if self.accept("punct", ".") else None
        )
        alias = f"{var}.{key}" if key else var
        if self.accept("keyword", "AS"):
            alias = self.expect("word", what="an alias").text
        return ReturnItem(var, key, alias)


def parse_query(text: str) -> GraphQuery:
    """Parse ``text`` as the GQL subset of this module.

    Raises:
        GraphQueryError: It does not parse; the message names the token and its position.
    """
    if not text.strip():
        raise GraphQueryError("the graph query is empty")
    return _Parser(text).query()


def validate_query(query: GraphQuery, ontology: Ontology) -> None:
    """Check ``query`` against ``ontology``: labels, properties, domains, keys, variables.

    Raises:
        GraphQueryError: Naming the first thing the ontology or the subset does not allow.
    """
    node_vars = {n.var: n for n in query.nodes}
    edge_vars = {e.var for e in query.edges}
    if len(node_vars) != len(query.nodes) or node_vars.keys() & edge_vars:
        raise GraphQueryError("each variable may be bound once in the pattern")
    for node in query.nodes:
        if node.label is not None and node.label not in ontology.classes:
            known = ", ".join(ontology.classes)
            raise GraphQueryError(f"unknown class {node.label!r}; the ontology has: {known}")
    for index, edge in enumerate(query.edges):
        _check_edge(edge, query.nodes[index], query.nodes[index + 1], ontology)
    for condition in query.conditions:
        keys = NODE_KEYS if condition.var in node_vars else EDGE_KEYS
        if condition.var not in node_vars and condition.var not in edge_vars:
            raise GraphQueryError(f"the filter names an unbound variable {condition.var!r}")
        if condition.key not in keys:
            raise GraphQueryError(
                f"{condition.var}.{condition.key}: filters may use {', '.join(sorted(keys))}"
            )
    for item in query.returns:
        if item.var not in node_vars and item.var not in edge_vars:
            raise GraphQueryError(f"RETURN names an unbound variable {item.var!r}")
        keys = NODE_KEYS if item.var in node_vars else EDGE_KEYS
        if item.key is not None and item.key not in keys:
            raise GraphQueryError(
                f"RETURN {item.var}.{item.key}: may return {', '.join(sorted(keys))}"
            )


def _check_edge(edge: EdgePattern, left: NodePattern, right: NodePattern, onto: Ontology) -> None:
    if edge.label is None:
        return
    prop = onto.properties.get(edge.label)
    if prop is None:
        known = ", ".join(onto.properties)
        raise GraphQueryError(f"unknown property {edge.label!r}; the ontology has: {known}")
    subject, obj = (right, left) if edge.direction == "in" else (left, right)
    if prop.kind == "datatype" and obj.label is not None and edge.direction != "any":
        raise GraphQueryError(
            f"{edge.label!r} holds a {prop.literal} value: its target node takes no class"
        )
    if edge.direction == "any":
        return
    if subject.label is not None and not onto.fits(prop.domain, subject.label):
        raise GraphQueryError(
            f"{edge.label!r} goes from {'|'.join(prop.domain)}, not from {subject.label!r}"
        )
    if prop.kind == "object" and obj.label is not None and not onto.fits(prop.range, obj.label):
        raise GraphQueryError(
            f"{edge.label!r} goes to {'|'.join(prop.range)}, not to {obj.label!r}"
        )
