"""Fakes and toy data shared by many tests: corpora with exact expected keys, misbehaving
sources, deterministic embeddings, small helpers. Tests import them from here; conftest.py only
turns some of them into fixtures.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path

from langchain_core.embeddings import Embeddings

from agentic_retrieval.errors import SourceError
from agentic_retrieval.sources.base import Hit, SearchQuery
from agentic_retrieval.sources.local.store.lexical_index import index_words
from agentic_retrieval.sources.memory import InMemoryKnowledgeSource

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
"""``../shared/data`` (Northwind PDFs, NASA Earth pages); absent on a fresh clone."""

# --- toy corpora ------------------------------------------------------------------------------

TOY_DOCS = [
    {
        "key": "fares",
        "title": "Fares and passes",
        "content": "A single tram ride costs 2 euros. A day pass costs 6 euros and is valid "
        "until 4 am the next morning.",
        "metadata": {"category": "fares", "year": 2024},
    },
    {
        "key": "bike-fees",
        "title": "Bike late fees",
        "content": "Bikes must be docked within 30 minutes; each extra 15 minutes adds a late "
        "fee of 1 euro.",
        "metadata": {"category": "bikes", "year": 2023},
    },
    {
        "key": "hours",
        "title": "Service hours",
        "content": "Trams run from 5 am until midnight on weekdays and until 2 am on Saturdays.",
        "metadata": {"category": "service", "year": 2024},
    },
    {
        "key": "lost",
        "title": "Lost and found",
        "content": "Items left on a tram are kept for 30 days at the Central Station office.",
        "metadata": {"category": "service", "year": 2022},
    },
]

FAQ_DOCS = [
    {
        "key": "faq-refund",
        "title": "Refunds",
        "content": "Unused day pass refunds are paid within 10 working days.",
        "metadata": {"category": "fares", "year": 2024},
    },
]

EARTH_DOCUMENTS = [
    {
        "id": "river-1",
        "title": "Rivers",
        "content": "The river floods the delta every spring.",
        "category": "earth",
        "year": 2021,
    },
    {
        "id": "river-2",
        "title": "Old rivers",
        "content": "An old river map of the delta.",
        "category": "earth",
        "year": 1999,
    },
    {
        "id": "ice-1",
        "title": "Glaciers",
        "content": "Glaciers carve valleys; meltwater feeds a river.",
        "category": "ice",
        "year": 2015,
    },
    {
        "id": "storm-1",
        "title": "Storms",
        "content": "Hurricanes form over warm ocean water.",
        "category": "atmosphere",
        "year": 2020,
    },
]
"""An Azure AI Search index's documents (key ``id``; ``category`` and ``year`` filterable), for
the Azure stand-in."""


TENANT_DOCS = [
    {
        "id": "acme-leave",
        "title": "Acme leave policy",
        "text": "Acme staff get 30 vacation days a year.",
        "groups": ["acme"],
    },
    {
        "id": "globex-leave",
        "title": "Globex leave policy",
        "text": "Globex staff get 20 vacation days a year.",
        "groups": ["globex"],
    },
    {
        "id": "acme-ceo",
        "title": "Acme CEO memo",
        "text": "Vacation days roll over for the Acme board only.",
        "users": ["alice"],
    },
    {
        "id": "holidays",
        "title": "Public holidays",
        "text": "Public holidays never count as vacation days.",
        "groups": ["all"],
    },
]
"""Two tenants' documents (groups ``acme`` and ``globex``), one for the user ``alice`` only
and one public (``all``), all about vacation days: index with
``add_documents(TENANT_DOCS, user_ids_field="users", group_ids_field="groups")``."""


def tenant_source(path: Path, name: str = "policies"):
    """A local source holding :data:`TENANT_DOCS` with their permissions."""
    from agentic_retrieval.sources.local import LocalKnowledgeSource

    source = LocalKnowledgeSource(
        name, path, description="Leave policies of two tenants", create=True
    )
    report = source.add_documents(TENANT_DOCS, user_ids_field="users", group_ids_field="groups")
    assert report.ok, report.failed
    return source


# --- sources ----------------------------------------------------------------------------------


class RecordingSource:
    """Wraps a source and records every query it receives."""

    def __init__(self, inner, name: str | None = None) -> None:
        self.inner = inner
        self.name = name or inner.name
        self.description = inner.description
        self.kind = inner.kind
        self.queries: list[SearchQuery] = []

    async def search(self, query: SearchQuery) -> list[Hit]:
        self.queries.append(query)
        return await self.inner.search(query)


class FailingSource:
    """A source whose backend is down: every search raises ``exc``.

    Args:
        name: The source name.
        exc: What to raise (default: a ``ConnectionError``, an exception the source did not
            describe; pass a ``SourceError`` for one it did).
    """

    kind = "searchIndex"
    description = "always fails"

    def __init__(self, name: str = "broken", exc: Exception | None = None) -> None:
        self.name = name
        self.exc = exc
        self.calls = 0

    async def search(self, query: SearchQuery) -> list[Hit]:
        self.calls += 1
        await asyncio.sleep(0)
        raise self.exc or ConnectionError("backend unreachable")


class FilterableMemorySource(InMemoryKnowledgeSource):
    """An in-memory source that names its filterable fields (``category``, ``year``), as the
    planner and ``kb.as_tool()`` read them from a source."""

    filterable_fields = ("category", "year")


def unreachable_index(name: str = "broken") -> FailingSource:
    """A source that reports its own failure: ``SourceError("ServiceUnavailable", ...)``."""
    return FailingSource(name, SourceError("ServiceUnavailable", "the index is unreachable"))


class SlowSource:
    """A source that answers after ``delay`` seconds (with one hit)."""

    kind = "searchIndex"

    def __init__(self, name: str = "slow", delay: float = 5.0) -> None:
        self.name = name
        self.description = "slow"
        self.delay = delay

    async def search(self, query: SearchQuery) -> list[Hit]:
        await asyncio.sleep(self.delay)
        return [Hit(doc_key="late", content=f"late answer about {query.text}")]


# --- embeddings -------------------------------------------------------------------------------


class ConceptEmbeddings(Embeddings):
    """Deterministic fake: one dimension per concept, synonyms share a dimension."""

    CONCEPTS = (
        frozenset({"car", "cars", "automobile", "vehicle"}),
        frozenset({"fee", "fees", "price", "cost", "euros"}),
        frozenset({"rain", "storm", "weather"}),
    )

    def __init__(self) -> None:
        self.calls = 0

    def _vector(self, text: str) -> list[float]:
        words = set(re.findall(r"\w+", text.lower()))
        vector = [float(len(words & concept)) for concept in self.CONCEPTS] + [0.1]
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)


class NamedConcepts(ConceptEmbeddings):
    """The concept fake, reporting a model name like provider embeddings do."""

    def __init__(self, model: str) -> None:
        super().__init__()
        self.model = model


# --- helpers ----------------------------------------------------------------------------------


def stemmed_words(text: str) -> list[str]:
    """The words the embedded store's index holds for ``text`` ("heating" is "heat")."""
    return [word for token in re.findall(r"\w+", text) for word in index_words(token)]


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, creating folders (test documents)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def user(text: str) -> dict:
    """A user message in the wire shape."""
    return {"role": "user", "content": [{"type": "text", "text": text}]}


# --- identity tokens --------------------------------------------------------------------------

ISSUER = "https://login.example.test/tenant/v2.0"
AUDIENCE = "api://agentic-retrieval-tests"
JWT_SECRET = "a-development-secret-of-at-least-32-bytes!"


class TokenMint:
    """Signs identity tokens for the tests: HS256 with :data:`JWT_SECRET`, or RS256 with a
    fresh RSA key published in a JWKS file (:meth:`write_jwks`)."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def claims(self, user: str | None = "alice", groups=(), **overrides) -> dict:
        import time

        now = int(time.time())
        # tokens minted when a test module is imported must outlive the whole suite's run
        claims = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "nbf": now, "exp": now + 4 * 3600}
        if user is not None:
            claims["oid"] = user
        if groups:
            claims["groups"] = list(groups)
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def hs256(self, user: str | None = "alice", groups=(), key: str = JWT_SECRET, **overrides):
        import jwt

        return jwt.encode(self.claims(user, groups, **overrides), key, algorithm="HS256")

    def rs256(self, user: str | None = "alice", groups=(), kid: str = "k1", **overrides):
        import jwt

        claims = self.claims(user, groups, **overrides)
        return jwt.encode(claims, self.private_key, algorithm="RS256", headers={"kid": kid})

    def write_jwks(self, path: Path, kid: str = "k1") -> Path:
        import json

        from jwt.algorithms import RSAAlgorithm

        jwk = json.loads(RSAAlgorithm.to_jwk(self.private_key.public_key()))
        jwk.update({"kid": kid, "use": "sig", "alg": "RS256"})
        path.write_text(json.dumps({"keys": [jwk]}))
        return path


# --- an entity graph over a small corpus with real relations ---------------------------------

COMPANY_ONTOLOGY = """{
  "@context": {"owl": "http://www.w3.org/2002/07/owl#",
               "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
               "xsd": "http://www.w3.org/2001/XMLSchema#",
               "ex": "http://example.org/companies#"},
  "@graph": [
    {"@id": "ex:Organization", "@type": "owl:Class", "rdfs:comment": "A company or lab"},
    {"@id": "ex:Person", "@type": "owl:Class"},
    {"@id": "ex:City", "@type": "owl:Class"},
    {"@id": "ex:acquired", "@type": "owl:ObjectProperty",
     "rdfs:domain": {"@id": "ex:Organization"}, "rdfs:range": {"@id": "ex:Organization"}},
    {"@id": "ex:locatedIn", "@type": "owl:ObjectProperty",
     "rdfs:domain": {"@id": "ex:Organization"}, "rdfs:range": {"@id": "ex:City"}},
    {"@id": "ex:foundedBy", "@type": "owl:ObjectProperty",
     "rdfs:domain": {"@id": "ex:Organization"}, "rdfs:range": {"@id": "ex:Person"}},
    {"@id": "ex:foundedYear", "@type": "owl:DatatypeProperty",
     "rdfs:domain": {"@id": "ex:Organization"}, "rdfs:range": {"@id": "xsd:integer"}}
  ]
}"""
"""Organizations, people and cities: who acquired whom, where each is, who founded it."""

COMPANY_DOCS = [
    {"id": "acme", "title": "Acme Corp", "text": "Acme Corp acquired Beta Labs in 2021."},
    {
        "id": "beta",
        "title": "Beta Labs",
        "text": "Beta Labs has its offices in Oslo. It was founded by Dana Smith in 2015.",
    },
    {"id": "gamma", "title": "Gamma Works", "text": "Gamma Works is a bakery in Lyon."},
]
"""A corpus whose answer to "where is the company Acme acquired?" spans two documents."""


def triple(subject, subject_type, predicate, obj, object_type=None, confidence=0.9):
    """One extracted triple as a scripted model returns it."""
    return {
        "subject": subject,
        "subject_type": subject_type,
        "predicate": predicate,
        "object": obj,
        "object_type": object_type,
        "confidence": confidence,
    }


COMPANY_TRIPLES = {
    "acme": [triple("Acme Corp", "Organization", "acquired", "Beta Labs", "Organization")],
    "beta": [
        triple("Beta Labs", "Organization", "locatedIn", "Oslo", "City"),
        triple("Beta Labs", "Organization", "foundedBy", "Dana Smith", "Person"),
        triple("Beta Labs", "Organization", "foundedYear", "2015"),
    ],
    "gamma": [triple("Gamma Works", "Organization", "locatedIn", "Lyon", "City")],
}
"""What a scripted extraction model answers for each document of COMPANY_DOCS (one chunk each)."""


# --- a tiny multi-hop corpus for eval --graph ------------------------------------------------
# "Where is the company Acme Corp acquired?" joins d1 (Acme Corp acquired Beta Labs) and d2
# (Beta Labs' offices are in Oslo), which shares no word with the question; the ontology names
# the entities and cue words the offline stand-in extracts by.

MULTIHOP_ONTOLOGY = {
    "@context": {
        "owl": "http://www.w3.org/2002/07/owl#",
        "rdfs": "http://www.w3.org/2000/01/rdf-schema#",
        "skos": "http://www.w3.org/2004/02/skos/core#",
        "ex": "http://example.org/companies#",
    },
    "@graph": [
        {"@id": "ex:Organization", "@type": "owl:Class"},
        {"@id": "ex:City", "@type": "owl:Class"},
        {
            "@id": "ex:acquired",
            "@type": "owl:ObjectProperty",
            "rdfs:label": "acquired",
            "skos:altLabel": ["bought"],
            "rdfs:domain": {"@id": "ex:Organization"},
            "rdfs:range": {"@id": "ex:Organization"},
        },
        {
            "@id": "ex:locatedIn",
            "@type": "owl:ObjectProperty",
            "rdfs:label": "located in",
            "skos:altLabel": ["offices in"],
            "rdfs:domain": {"@id": "ex:Organization"},
            "rdfs:range": {"@id": "ex:City"},
        },
        {"@id": "ex:acme", "@type": "ex:Organization", "rdfs:label": "Acme Corp"},
        {
            "@id": "ex:beta",
            "@type": "ex:Organization",
            "rdfs:label": "Beta Labs",
            "skos:altLabel": "Beta",
        },
        {"@id": "ex:oslo", "@type": "ex:City", "rdfs:label": "Oslo"},
        {"@id": "ex:lyon", "@type": "ex:City", "rdfs:label": "Lyon"},
    ],
}
MULTIHOP_CORPUS = [
    {"_id": "d1", "title": "Deal", "text": "Acme Corp acquired Beta Labs in 2021."},
    {"_id": "d2", "title": "Offices", "text": "Beta Labs has its offices in Oslo, by the fjord."},
    {"_id": "d3", "title": "Acme", "text": "Acme Corp is a company located in Lyon."},
    {"_id": "d4", "title": "Weather", "text": "Oslo had a cold winter."},
]
MULTIHOP_QUESTION = "Where is the company that Acme Corp acquired located?"
MULTIHOP_QUESTIONS = [
    {
        "id": "q1",
        "question": MULTIHOP_QUESTION,
        "relevant": ["d1", "d2"],
        "evidence": ["acquired Beta Labs", "offices in Oslo"],
    }
]


def write_multihop_toy(root: Path) -> Path:
    """The multi-hop toy in BEIR layout, with questions.jsonl and ontology.jsonld beside it."""

    def jsonl(rows: list[dict]) -> str:
        return "".join(json.dumps(row) + "\n" for row in rows)

    write(root / "corpus.jsonl", jsonl(MULTIHOP_CORPUS))
    write(root / "queries.jsonl", jsonl([{"_id": "q1", "text": MULTIHOP_QUESTION}]))
    write(root / "qrels" / "test.tsv", "q1\td1\t1\nq1\td2\t1\n")
    write(root / "questions.jsonl", jsonl(MULTIHOP_QUESTIONS))
    write(root / "ontology.jsonld", json.dumps(MULTIHOP_ONTOLOGY))
    return root
