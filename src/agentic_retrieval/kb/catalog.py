"""Live objects built from a service directory's definitions, rebuilt when they change.

:class:`ServiceCatalog` turns stored definitions into what requests use: a
:class:`~agentic_retrieval.knowledge_base.KnowledgeBase` per knowledge base (its sources over
the embedded stores, its defaults from the definition), the documents of each index, the
store of each file source. Everything is built on first use and cached until the directory's
generation moves (a definition changed, in this process or another), so a request never sees
a mix of old and new definitions.

The cache holds what exists and nothing else: a name that is not defined is looked up again
on every request (one primary-key read) rather than remembered, so callers asking for
endless made-up names cannot grow it; and it keeps at most :data:`MAX_CACHED` objects, the
least recently used going first.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from agentic_retrieval.context import Context
from agentic_retrieval.kb.definitions import (
    IndexDefinition,
    KnowledgeBaseDefinition,
    KnowledgeSourceDefinition,
)
from agentic_retrieval.kb.index_documents import IndexDocuments
from agentic_retrieval.kb.model_connections import first_chat_model
from agentic_retrieval.kb.service import StoredDefinition
from agentic_retrieval.kb.service_state import ServiceState
from agentic_retrieval.kb.source_kinds import SOURCE_KINDS
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.sources.local.documents import DocumentStore

T = TypeVar("T")

MAX_CACHED = 512
"""Most live objects (knowledge bases, index documents, file stores) kept built at once."""


class ServiceCatalog:
    """Knowledge bases, index documents and file stores of a service directory.

    Args:
        service: The data directory.
        chat_model: The chat model of every knowledge base (default: the environment's).
        reranker: The reranker of every knowledge base (``None``: the library default).
        embeddings: The bundled model, with which file knowledge sources embed their chunks
            and queries (hybrid); ``None``: they rank lexically (``--no-embeddings``).
        ingestion: The model uploads are embedded with, if not ``embeddings`` (an instance
            of its own, so queries do not wait behind uploads).
    """

    def __init__(
        self,
        service: ServiceState,
        *,
        chat_model: BaseChatModel | str | None = None,
        reranker: Reranker | None = None,
        embeddings: Embeddings | None = None,
        ingestion: Embeddings | None = None,
    ) -> None:
        self.service = service
        self.chat_model = chat_model
        self.reranker = reranker
        self.embeddings = embeddings
        self.ingestion = ingestion
        self._lock = threading.RLock()
        self._generation = -1
        self._cache: OrderedDict[tuple[str, str], Any] = OrderedDict()

    def knowledge_base(self, name: str) -> KnowledgeBase | None:
        """The knowledge base called ``name``, built from its definition."""
        return self._cached(("knowledgeBase", name), self._build_knowledge_base)

    def knowledge_base_names(self) -> list[str]:
        """Names of the defined knowledge bases, sorted."""
        return [d.name for d in self.service.definitions("knowledgeBase")]

    def index_documents(self, name: str) -> IndexDocuments | None:
        """The documents of index ``name``."""
        return self._cached(("index", name), self._build_index_documents)

    def file_documents(self, name: str) -> DocumentStore | None:
        """The store of file knowledge source ``name`` (``None`` for other kinds)."""
        return self._cached(("files", name), self._build_file_documents)

    def _cached(self, key: tuple[str, str], build: Callable[[str], T | None]) -> T | None:
        """The object ``key`` names, built on first use; a missing one is never remembered."""
        generation = self.service.generation()
        with self._lock:
            if generation != self._generation:
                self._cache.clear()
                self._generation = generation
                self.service.close_unused_stores()
            if key in self._cache:
                self._cache.move_to_end(key)
                cached: T = self._cache[key]  # the key names the builder, so the type matches
                return cached
            built = build(key[1])
            if built is not None:
                self._cache[key] = built
                if len(self._cache) > MAX_CACHED:
                    self._cache.popitem(last=False)
            return built

    def _build_index_documents(self, name: str) -> IndexDocuments | None:
        stored = self.service.get("index", name)
        if stored is None:
            return None
        index = IndexDefinition.model_validate(stored.body)
        return IndexDocuments(index, DocumentStore(self.service.store(stored)))

    def _build_file_documents(self, name: str) -> DocumentStore | None:
        stored = self.service.get("knowledgeSource", name)
        if stored is None or stored.store is None:
            return None
        return self.file_store(stored)

    def file_store(self, stored: StoredDefinition) -> DocumentStore:
        """The store of a file knowledge source, embedding with this service's model."""
        return DocumentStore(
            self.service.store(stored), embeddings=self.embeddings, ingestion=self.ingestion
        )

    def _build_knowledge_base(self, name: str) -> KnowledgeBase | None:
        stored = self.service.get("knowledgeBase", name)
        if stored is None:
            return None
        definition = KnowledgeBaseDefinition.model_validate(stored.body)
        sources = [self._build_source(ref) for ref in definition.source_names]
        defaults = defaults_for(definition)
        unreranked = [n for n in definition.source_names if self._results_processing(n) == "none"]
        if unreranked:
            defaults = dataclasses.replace(defaults, unreranked_sources=unreranked)
        return KnowledgeBase(
            [s for s in sources if s is not None],
            name=definition.name,
            description=definition.description or "",
            # the knowledge base's own openAICompatible model first, else the service's
            chat_model=first_chat_model(definition.models) or self.chat_model,
            reranker=self.reranker,
            defaults=defaults,
        )

    def _results_processing(self, name: str) -> str | None:
        """A knowledge source's stored ``resultsProcessing`` (``None``: not set)."""
        stored = self.service.get("knowledgeSource", name)
        if stored is None:
            return None
        return KnowledgeSourceDefinition.model_validate(stored.body).results_processing

    def _build_source(self, name: str) -> KnowledgeSource | None:
        stored = self.service.get("knowledgeSource", name)
        if stored is None:
            return None
        definition = KnowledgeSourceDefinition.model_validate(stored.body)
        return SOURCE_KINDS[definition.kind].build(self, definition, stored)


def defaults_for(definition: KnowledgeBaseDefinition, base: Context | None = None) -> Context:
    """The run settings a knowledge base's definition implies where a request is silent.

    Precedence is request > knowledge base > service: ``base`` holds the service's defaults
    (default: :class:`Context`'s), the definition overrides them, and a request's own values
    override both (:func:`~agentic_retrieval.wire.retrieve.run_context`).
    """
    overrides: dict[str, Any] = {}
    effort = definition.retrieval_reasoning_effort
    if effort is not None:
        overrides["reasoning_effort"] = effort.kind
    if definition.output_mode is not None:
        overrides["output_mode"] = definition.output_mode
    return definition.settings.context(dataclasses.replace(base or Context(), **overrides))


class KnowledgeBaseRegistry(Mapping[str, KnowledgeBase]):
    """Knowledge bases by name: fixed ones (``--kb`` directories) plus a service's.

    Args:
        fixed: Knowledge bases served as they are (read-only over REST).
        catalog: The service's catalog, if the server has a data directory.
    """

    def __init__(
        self, fixed: Mapping[str, KnowledgeBase], catalog: ServiceCatalog | None = None
    ) -> None:
        self.fixed = dict(fixed)
        self.catalog = catalog

    def __getitem__(self, name: str) -> KnowledgeBase:
        """The knowledge base called ``name``."""
        found = self.fixed.get(name)
        if found is None and self.catalog is not None:
            found = self.catalog.knowledge_base(name)
        if found is None:
            raise KeyError(name)
        return found

    def __iter__(self) -> Iterator[str]:
        """Fixed names first, then the service's."""
        yield from self.fixed
        if self.catalog is not None:
            yield from (n for n in self.catalog.knowledge_base_names() if n not in self.fixed)

    def __len__(self) -> int:
        """How many knowledge bases there are."""
        return sum(1 for _ in self)
