"""An entity graph's ontology: its classes, object properties and datatype properties.

Azure's ``graphExtractionParameters.ontology`` holds a JSON-LD 1.1 document as a string. This
module reads the part of JSON-LD an ontology is written in, strictly: an inline ``@context``
of prefixes (and ``@vocab``), a ``@graph`` (or a top-level array, or one node) of nodes whose
``@type`` is ``owl:Class`` / ``rdfs:Class``, ``owl:ObjectProperty`` or
``owl:DatatypeProperty``, with ``rdfs:label``, ``rdfs:comment``, ``rdfs:subClassOf``,
``rdfs:domain``, ``rdfs:range`` and ``skos:altLabel``. Anything else in a node is ignored, as
a JSON-LD processor ignores terms it cannot expand.

Why no JSON-LD library: ``pyld`` would expand the full language, including remote
``@context`` URLs, which means network fetches while ingesting (refused here: an ontology
must be self-contained) and a document loader to lock down; ``rdflib`` brings a triple store
and parsers for every RDF syntax to read a few dozen nodes. The subset is small enough to
read exactly, and a strict reader can name what is wrong (which node, which key) instead of
silently expanding it into nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from agentic_retrieval.errors import OntologyError

OWL = "http://www.w3.org/2002/07/owl#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
XSD = "http://www.w3.org/2001/XMLSchema#"
SKOS = "http://www.w3.org/2004/02/skos/core#"
_KNOWN_PREFIXES = {"owl": OWL, "rdfs": RDFS, "xsd": XSD, "skos": SKOS}

_CLASS_TYPES = {OWL + "Class", RDFS + "Class"}
_OBJECT_PROPERTY = OWL + "ObjectProperty"
_DATATYPE_PROPERTY = OWL + "DatatypeProperty"

LiteralKind = Literal["string", "double", "bool", "dateTime"]
"""The kinds of literal a datatype property holds (the edge list's ``object*Field`` roles)."""
_XSD_KINDS: dict[str, LiteralKind] = {
    "string": "string",
    "double": "double",
    "float": "double",
    "decimal": "double",
    "integer": "double",
    "int": "double",
    "boolean": "bool",
    "dateTime": "dateTime",
    "date": "dateTime",
}


@dataclass(frozen=True)
class OntologyClass:
    """A class of entities (``Person``, ``Organization``)."""

    name: str
    """The local name (the IRI's fragment or last path segment): what queries and models use."""
    iri: str
    label: str | None = None
    comment: str | None = None
    parents: tuple[str, ...] = ()
    """Local names of the classes it is a subclass of."""


@dataclass(frozen=True)
class Property:
    """An object property (entity to entity) or a datatype property (entity to literal)."""

    name: str
    iri: str
    kind: Literal["object", "datatype"]
    domain: tuple[str, ...] = ()
    """Classes a subject may have (empty: any)."""
    range: tuple[str, ...] = ()
    """Classes an object may have (object properties; empty: any)."""
    literal: LiteralKind = "string"
    """The literal's kind (datatype properties)."""
    label: str | None = None
    comment: str | None = None


@dataclass(frozen=True)
class Ontology:
    """A parsed ontology, with lookups by local name."""

    name: str
    classes: Mapping[str, OntologyClass]
    properties: Mapping[str, Property] = field(default_factory=dict)

    @property
    def object_properties(self) -> list[Property]:
        """The entity-to-entity properties, in document order."""
        return [p for p in self.properties.values() if p.kind == "object"]

    @property
    def datatype_properties(self) -> list[Property]:
        """The entity-to-literal properties, in document order."""
        return [p for p in self.properties.values() if p.kind == "datatype"]

    def is_a(self, cls: str, ancestor: str) -> bool:
        """Whether ``cls`` is ``ancestor`` or one of its subclasses."""
        seen: set[str] = set()
        todo = [cls]
        while todo:
            current = todo.pop()
            if current == ancestor:
                return True
            if current in seen or current not in self.classes:
                continue
            seen.add(current)
            todo.extend(self.classes[current].parents)
        return False

    def fits(self, names: tuple[str, ...], cls: str) -> bool:
        """Whether ``cls`` satisfies a domain or range (``names`` empty: anything does)."""
        return not names or any(self.is_a(cls, n) for n in names)

    def describe(self) -> str:
        """The ontology as a model reads it: classes, then properties with domain and range."""
        lines = ["Classes:"]
        for c in self.classes.values():
            lines.append(f"- {c.name}" + (f": {c.comment}" if c.comment else ""))
        lines.append("Properties (subject class -> object):")
        for p in self.properties.values():
            domain = "|".join(p.domain) or "any"
            target = ("|".join(p.range) or "any") if p.kind == "object" else p.literal
            note = f": {p.comment}" if p.comment else ""
            lines.append(f"- {p.name} ({domain} -> {target}){note}")
        return "\n".join(lines)


def parse_ontology(text: str, name: str = "ontology") -> Ontology:
    """Read an inline JSON-LD 1.1 ontology.

    Args:
        text: The JSON-LD document as a string (Azure's ``ontology.value``).
        name: The ontology's name (``ontology.name``).

    Raises:
        OntologyError: The text is not JSON, not the JSON-LD subset above (a remote context,
            a node without ``@id``, a property whose domain names no declared class...), or it
            declares no class.
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OntologyError(f"ontology {name!r} is not JSON: {exc}") from None
    prefixes, vocab = _context(document, name)
    reader = _Reader(name, prefixes, vocab)
    for index, node in enumerate(_nodes(document, name)):
        reader.add(node, index)
    return reader.ontology()


def _context(document: Any, name: str) -> tuple[dict[str, str], str | None]:
    """The prefixes and ``@vocab`` of the document's inline ``@context``."""
    prefixes = dict(_KNOWN_PREFIXES)
    vocab = None
    raw = document.get("@context") if isinstance(document, dict) else None
    contexts = raw if isinstance(raw, list) else [raw] if raw is not None else []
    for context in contexts:
        if isinstance(context, str):
            raise OntologyError(
                f"ontology {name!r}: remote @context {context!r} is not supported; "
                "write the prefixes inline"
            )
        if not isinstance(context, dict):
            raise OntologyError(f"ontology {name!r}: @context must be an object")
        for key, value in context.items():
            if key == "@vocab" and isinstance(value, str):
                vocab = value
            elif isinstance(value, str) and not key.startswith("@"):
                prefixes[key] = value
    return prefixes, vocab


def _nodes(document: Any, name: str) -> list[dict[str, Any]]:
    if isinstance(document, list):
        nodes = document
    elif isinstance(document, dict) and "@graph" in document:
        nodes = document["@graph"]
    elif isinstance(document, dict):
        nodes = [document]
    else:
        raise OntologyError(f"ontology {name!r}: a JSON-LD document is an object or an array")
    if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
        raise OntologyError(f"ontology {name!r}: @graph must be an array of node objects")
    return nodes


class _Reader:
    """Collects classes and properties node by node, then checks domains and ranges."""

    def __init__(self, name: str, prefixes: dict[str, str], vocab: str | None) -> None:
        self.name = name
        self.prefixes = prefixes
        self.vocab = vocab
        self.classes: dict[str, OntologyClass] = {}
        self.properties: dict[str, Property] = {}

    def expand(self, term: str) -> str:
        """A compact IRI (``owl:Class``), a term under ``@vocab``, or an absolute IRI."""
        prefix, sep, rest = term.partition(":")
        if sep and prefix in self.prefixes and not rest.startswith("//"):
            return self.prefixes[prefix] + rest
        if sep:
            return term
        return (self.vocab or "") + term

    def add(self, node: dict[str, Any], index: int) -> None:
        iri = node.get("@id")
        if not isinstance(iri, str) or not iri:
            raise OntologyError(f"ontology {self.name!r}: node {index} has no @id")
        types = {self.expand(t) for t in _strings(node.get("@type"))}
        local = _local_name(self.expand(iri))
        label, comment = _text(node, "rdfs:label"), _text(node, "rdfs:comment")
        if types & _CLASS_TYPES:
            parents = tuple(_local_name(self.expand(p)) for p in _refs(node, "rdfs:subClassOf"))
            self.classes[local] = OntologyClass(local, iri, label, comment, parents)
        elif _OBJECT_PROPERTY in types or _DATATYPE_PROPERTY in types:
            kind: Literal["object", "datatype"] = (
                "object" if _OBJECT_PROPERTY in types else "datatype"
            )
            domain = tuple(_local_name(self.expand(d)) for d in _refs(node, "rdfs:domain"))
            ranges = [self.expand(r) for r in _refs(node, "rdfs:range")]
            literal = _literal_kind(ranges, node, self.name) if kind == "datatype" else "string"
            range_ = tuple(_local_name(r) for r in ranges) if kind == "object" else ()
            self.properties[local] = Property(
                local, iri, kind, domain, range_, literal, label, comment
            )

    def ontology(self) -> Ontology:
        if not self.classes:
            raise OntologyError(
                f"ontology {self.name!r} declares no class (no node of @type owl:Class)"
            )
        for prop in self.properties.values():
            for cls in (*prop.domain, *prop.range):
                if cls not in self.classes:
                    raise OntologyError(
                        f"ontology {self.name!r}: property {prop.name!r} names class "
                        f"{cls!r}, which the ontology does not declare"
                    )
        return Ontology(self.name, dict(self.classes), dict(self.properties))


def _strings(value: Any) -> list[str]:
    values = value if isinstance(value, list) else [value] if value is not None else []
    return [v for v in values if isinstance(v, str)]


def _refs(node: dict[str, Any], key: str) -> list[str]:
    """IRIs under ``key``: strings or ``{"@id": ...}`` objects, alone or in an array."""
    raw = node.get(key)
    values = raw if isinstance(raw, list) else [raw] if raw is not None else []
    refs = []
    for value in values:
        if isinstance(value, dict):
            value = value.get("@id")
        if isinstance(value, str):
            refs.append(value)
    return refs


def _text(node: dict[str, Any], key: str) -> str | None:
    value = node.get(key)
    if isinstance(value, list):
        value = value[0] if value else None
    if isinstance(value, dict):
        value = value.get("@value")
    return value if isinstance(value, str) else None


def _local_name(iri: str) -> str:
    for sep in ("#", "/", ":"):
        if sep in iri:
            iri = iri.rsplit(sep, 1)[1]
    return iri


def _literal_kind(ranges: list[str], node: dict[str, Any], name: str) -> LiteralKind:
    for iri in ranges:
        if iri.startswith(XSD):
            kind = _XSD_KINDS.get(iri[len(XSD) :])
            if kind is None:
                raise OntologyError(
                    f"ontology {name!r}: datatype property {node.get('@id')!r} has range "
                    f"{iri!r}; supported: xsd:{', xsd:'.join(_XSD_KINDS)}"
                )
            return kind
    return "string"
