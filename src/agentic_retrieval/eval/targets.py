"""What an evaluation runs against: a knowledge-base directory, or a ``KnowledgeBase`` object.

A directory can be opened lexically (vectors ignored) or as indexed (hybrid where a source
has vectors), with any reranker by name, so each configuration gets its own
:class:`~agentic_retrieval.KnowledgeBase` over the same SQLite files. A ``KnowledgeBase``
object is evaluated as it is built; only effort, depth and output mode can vary.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel

from agentic_retrieval.errors import EvalConfigurationError, InvalidRequestError
from agentic_retrieval.eval.configurations import Configuration
from agentic_retrieval.eval.datasets import MAX_LISTED, DatasetError, Question
from agentic_retrieval.eval.graphs import GraphSetup, extract_graphs, with_graphs
from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.llm.chat_models import MODEL_ENV_VAR, model_identity
from agentic_retrieval.rerankers.registry import reranker_by_name
from agentic_retrieval.sources.base import GraphKnowledgeSource
from agentic_retrieval.sources.graph import EntityGraphSource
from agentic_retrieval.sources.local import LocalKnowledgeSource
from agentic_retrieval.sources.local.ingest import slugify
from agentic_retrieval.wire.retrieve import check_request, parse_request

if TYPE_CHECKING:
    from agentic_retrieval.sources.postgres import PostgresKnowledgeSource


class EvalTarget:
    """Builds the knowledge base each configuration runs on."""

    name = "knowledge-base"

    def knowledge_base(self, configuration: Configuration) -> KnowledgeBase:
        """The knowledge base for ``configuration``."""
        raise NotImplementedError

    def document_keys(self) -> set[str] | None:
        """Every document key judgements may name (``None``: cannot be listed)."""
        return None

    async def prepare(self) -> list[str]:
        """Build what the knowledge bases need before the first question; notes on it."""
        return []

    def close(self) -> None:
        """Release what was opened."""


class DirectoryTarget(EvalTarget):
    """A knowledge-base directory, opened lexically or as indexed.

    Args:
        path: The directory.
        chat_model: For configurations above minimal effort (object or ``provider:model``;
            ``None``: ``$AGENTIC_RETRIEVAL_CHAT_MODEL``).
        embeddings: An ``Embeddings`` for hybrid sources (``None``: each source's recorded
            model, built by name).
        graph: How configurations with ``graph`` get their entity graphs.
        cache_dir: Where the graphs' edge lists are cached (default: ``<cache>/eval``).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        chat_model: BaseChatModel | str | None = None,
        embeddings: Embeddings | None = None,
        graph: GraphSetup | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        self.path = Path(path)
        self.chat_model = chat_model
        self.embeddings = embeddings
        self.graph = graph
        self.cache_dir = cache_dir
        self._directories: dict[str, KnowledgeBaseDirectory] = {}
        self._graph_model: BaseChatModel | None = None
        self._graph_sources: list[EntityGraphSource] = []
        self.name = self._directory("lexical").name

    def _directory(self, retrieval: str) -> KnowledgeBaseDirectory:
        # one directory object per retrieval mode: each caches its opened sources
        if retrieval not in self._directories:
            self._directories[retrieval] = KnowledgeBaseDirectory(self.path).load()
        return self._directories[retrieval]

    def sources(
        self, retrieval: str | None
    ) -> list[LocalKnowledgeSource | PostgresKnowledgeSource]:
        """The sources opened for a retrieval mode.

        Raises:
            EvalConfigurationError: ``hybrid`` on a knowledge base without vectors, or no sources.
        """
        mode = retrieval or "indexed"
        directory = self._directory(mode)
        if not directory.source_names:
            raise EvalConfigurationError(f"knowledge base {directory.name!r} has no sources")
        if mode == "hybrid" and not any(entry.embeddings for entry in directory.sources):
            raise EvalConfigurationError(
                f"hybrid retrieval: no source of {directory.name!r} was indexed with vectors "
                "(index with --embeddings local or provider:model)"
            )
        return directory.open_sources(False if mode == "lexical" else self.embeddings)

    def knowledge_base(self, configuration: Configuration) -> KnowledgeBase:
        """A knowledge base over the sources for the configuration's retrieval mode."""
        directory = self._directory(configuration.retrieval or "indexed")
        sources: list[Any] = list(self.sources(configuration.retrieval))
        if configuration.graph:
            sources = self._with_graphs(configuration, sources)
        return KnowledgeBase(
            sources,
            name=directory.name,
            description=directory.description,
            chat_model=self.chat_model,
            reranker=reranker_by_name(configuration.reranker),
            defaults=configuration.context(),
        )

    def _with_graphs(self, configuration: Configuration, sources: list[Any]) -> list[Any]:
        if self.graph is None:
            raise EvalConfigurationError(
                f"configuration {configuration.name} searches an entity graph: give the "
                "evaluation an ontology (--graph FILE, or graph= from Python)"
            )
        if self._graph_model is None:
            self._graph_model = self.graph.resolve_model(self.chat_model)
        wrapped = with_graphs(sources, self.graph, self._graph_model, self.cache_dir)
        self._graph_sources += [s for s in wrapped if isinstance(s, EntityGraphSource)]
        return wrapped

    @property
    def graph_model_name(self) -> str | None:
        """The graph extraction model's name (``None``: no graph was extracted)."""
        if self._graph_model is None:
            return None
        return model_identity(self._graph_model).model_name

    async def prepare(self) -> list[str]:
        """Extract the entity graphs the configurations search (changed documents only)."""
        if self.graph is None or self._graph_model is None or not self._graph_sources:
            return []
        return await extract_graphs(self._graph_sources, self.graph, self._graph_model)

    def document_keys(self) -> set[str]:
        """Record ids and file slugs of every source."""
        keys: set[str] = set()
        for source in self.sources("lexical"):
            keys |= source.store.document_keys()
        return keys

    def close(self) -> None:
        """Close every opened source."""
        for directory in self._directories.values():
            directory.close()


class KnowledgeBaseTarget(EvalTarget):
    """A ``KnowledgeBase`` object, evaluated with its own sources, reranker and models."""

    def __init__(self, knowledge_base: KnowledgeBase) -> None:
        self.kb = knowledge_base
        self.name = knowledge_base.name

    def knowledge_base(self, configuration: Configuration) -> KnowledgeBase:
        """The knowledge base itself (each call passes the configuration's settings).

        Raises:
            EvalConfigurationError: The configuration chooses a retrieval mode or reranker,
                which only a knowledge-base directory can change.
        """
        if configuration.retrieval is not None or configuration.reranker is not None:
            raise EvalConfigurationError(
                f"configuration {configuration.name}: a KnowledgeBase object is evaluated with "
                "its own sources and reranker; to compare lexical/hybrid or rerankers, "
                "evaluate its knowledge-base directory (or build one KnowledgeBase per setting)"
            )
        if configuration.graph and not any(
            isinstance(s, GraphKnowledgeSource) for s in self.kb.sources.values()
        ):
            raise EvalConfigurationError(
                f"configuration {configuration.name} searches an entity graph, and no source "
                f"of {self.kb.name!r} has one (attach it with EntityGraphSource.open)"
            )
        return self.kb

    def document_keys(self) -> set[str] | None:
        """Document keys of its local sources; ``None`` when another kind is present."""
        keys: set[str] = set()
        for source in self.kb.sources.values():
            if not isinstance(source, LocalKnowledgeSource):
                return None
            keys |= source.store.document_keys()
        return keys


def check_model(kb: KnowledgeBase, configuration: Configuration) -> None:
    """Fail before the run when a configuration needs a chat model that is not configured.

    Raises:
        EvalConfigurationError: Naming the configuration and how to configure a model.
    """
    if not configuration.needs_model:
        return
    context = configuration.context(kb.defaults)
    if configuration.effort == "auto" and not kb.bindings.models.is_configured("planning", context):
        # auto without a model never escalates: the figures would be minimal's, under auto's name
        raise EvalConfigurationError(
            f"configuration {configuration.name} needs a chat model: reasoning_effort 'auto' "
            f"escalates only with a planning model and none is configured, so it would measure "
            f"the model-free tier under auto's name: set {MODEL_ENV_VAR} (e.g. "
            "openai:gpt-4.1-mini), or measure minimal"
        )
    probe = parse_request(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "probe"}]}]}
    )
    try:
        check_request(probe, context, kb.bindings)
    except InvalidRequestError as exc:
        raise EvalConfigurationError(
            f"configuration {configuration.name} needs a chat model: {exc}"
        ) from None


def resolve_judgements(questions: Sequence[Question], keys: set[str] | None) -> list[Question]:
    """Map judged keys onto the knowledge base's document keys.

    A key is a record id or a file's slug; a file may also be named by its path relative to
    the indexed folder's parent (``riders/fares.md`` for the slug ``riders-fares-md``).

    Raises:
        DatasetError: Judgements naming documents the knowledge base does not hold.
    """
    if keys is None:
        return list(questions)
    resolved: list[Question] = []
    unknown: list[str] = []
    for question in questions:
        relevant: dict[str, int] = {}
        for key, grade in question.relevant.items():
            match = key if key in keys else slugify(key) if slugify(key) in keys else None
            if match is None:
                unknown.append(key)
            else:
                relevant[match] = max(grade, relevant.get(match, grade))
        resolved.append(_with_relevant(question, relevant))
    if unknown:
        distinct = list(dict.fromkeys(unknown))
        listed = ", ".join(distinct[:MAX_LISTED]) + (" ..." if len(distinct) > MAX_LISTED else "")
        raise DatasetError(
            f"the questions judge {len(distinct)} documents the knowledge base does not hold: "
            f"{listed} (keys are record ids or file slugs such as 'docs-guide-md')"
        )
    return resolved


def _with_relevant(question: Question, relevant: dict[str, int]) -> Question:
    return Question(question.id, question.messages, relevant, question.evidence, question.answer)
