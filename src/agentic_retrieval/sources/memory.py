"""An in-memory knowledge source: BM25 over a list of documents, with OData filters.

Meant for tests, notebooks and small corpora that fit in a Python list; the embedded SQLite
store (:mod:`agentic_retrieval.sources.local`) is the on-disk default.

A document may carry ``permissions`` (a :class:`~agentic_retrieval.permissions.Permissions`,
or ``{"userIds": [...], "groupIds": [...]}``); searches skip what the query's identity may not
see before scoring, by the rule of :mod:`agentic_retrieval.permissions`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agentic_retrieval.errors import PermissionsNotEnforceableError
from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.base import Hit, SearchQuery, url_from_metadata
from agentic_retrieval.text import query_terms, tokenize


@dataclass(frozen=True)
class MemoryDocument:
    """A document held by :class:`InMemoryKnowledgeSource`."""

    key: str
    content: str
    title: str | None = None
    metadata: Mapping[str, Any] | None = None
    permissions: Permissions | None = None
    """Who may see it (``None``: unmarked)."""


class InMemoryKnowledgeSource:
    """BM25 (Okapi, k1=1.5, b=0.75) over documents kept in memory.

    Args:
        name: The knowledge source name.
        documents: Documents as :class:`MemoryDocument` or dicts with ``key``/``id``,
            ``content``, optional ``title``, ``metadata`` and ``permissions``.
        description: What the source holds (read by the planner).
        kind: The wire kind of its activity records and references.
    """

    def __init__(
        self,
        name: str,
        documents: Iterable[MemoryDocument | Mapping[str, Any]],
        *,
        description: str = "",
        kind: str = "searchIndex",
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        self.name = name
        self.description = description
        self.kind = kind
        self._k1, self._b = k1, b
        self._docs = [_as_document(d) for d in documents]
        self._tokens = [Counter(tokenize(f"{d.title or ''} {d.content}")) for d in self._docs]
        self._lengths = [sum(t.values()) for t in self._tokens]
        self._avg_len = (sum(self._lengths) / len(self._lengths)) if self._docs else 0.0
        df: Counter[str] = Counter()
        for tokens in self._tokens:
            df.update(tokens.keys())
        n = len(self._docs)
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def __len__(self) -> int:
        return len(self._docs)

    def citation_url(self, hit: Hit, *, endpoint: str | None, api_version: str) -> str | None:
        """The hit's file (``file://`` URI, PDF page anchored) or web URL, if it has one."""
        return url_from_metadata(hit.metadata)

    trims_by_permission = True
    """Documents the query's identity may not see are skipped before scoring."""

    async def search(self, query: SearchQuery) -> list[Hit]:
        """Score every document the identity may see matching the filter; the best ``top``.

        Raises:
            PermissionsNotEnforceableError: Permissions are enforced and no document has any.
        """
        access = query.access
        if access.enforce and self._docs and all(d.permissions is None for d in self._docs):
            raise PermissionsNotEnforceableError(
                f"knowledge source '{self.name}' holds no permission metadata"
            )
        predicate = _predicate(query.filter)
        terms = query_terms(query.text)
        scored: list[tuple[float, int]] = []
        for index, doc in enumerate(self._docs):
            if not access.may_see(doc.permissions) or not predicate(dict(doc.metadata or {})):
                continue
            score = self._bm25(index, terms)
            if score > 0:
                scored.append((score, index))
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [self._hit(i, s) for s, i in scored[: query.top]]

    def _bm25(self, index: int, terms: dict[str, int]) -> float:
        tokens, length = self._tokens[index], self._lengths[index]
        norm = self._k1 * (1 - self._b + self._b * length / (self._avg_len or 1.0))
        score = 0.0
        for term, repeats in terms.items():
            tf = tokens.get(term, 0)
            if tf:
                score += repeats * self._idf[term] * tf * (self._k1 + 1) / (tf + norm)
        return score

    def _hit(self, index: int, score: float) -> Hit:
        doc = self._docs[index]
        return Hit(
            doc_key=doc.key,
            content=doc.content,
            title=doc.title,
            source=self.name,
            score=score,
            metadata=dict(doc.metadata or {}),
        )


def _as_document(value: MemoryDocument | Mapping[str, Any]) -> MemoryDocument:
    if isinstance(value, MemoryDocument):
        return value
    key = value.get("key", value.get("id"))
    if key is None or "content" not in value:
        raise ValueError("a document needs 'key' (or 'id') and 'content'")
    permissions = value.get("permissions")
    if isinstance(permissions, Mapping):
        permissions = Permissions.from_lists(
            permissions.get("userIds"), permissions.get("groupIds")
        )
    return MemoryDocument(
        key=str(key),
        content=str(value["content"]),
        title=value.get("title"),
        metadata=value.get("metadata") or {},
        permissions=permissions,
    )


def _predicate(filter_text: str | None) -> Any:
    if not filter_text or not filter_text.strip():
        return lambda _record: True
    from agentic_retrieval.odata import compile_predicate

    return compile_predicate(filter_text)
