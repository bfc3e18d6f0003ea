"""The live objects a compiled graph is bound to: sources, chat models, reranker.

They are fixed when the graph is built (:func:`agentic_retrieval.build_graph`) and shared by
every run, so stores and HTTP clients are opened once; the per-run, serialisable settings
live in :class:`~agentic_retrieval.context.Context`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from langchain_core.language_models import BaseChatModel

from agentic_retrieval.context import Context
from agentic_retrieval.errors import UnknownKnowledgeSourceError
from agentic_retrieval.graph.records import SourceParams
from agentic_retrieval.llm.chat_models import ChatModels
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.rerankers.passthrough import PassthroughReranker
from agentic_retrieval.sources.base import KnowledgeSource


@dataclass
class Bindings:
    """Sources by name, chat models by role, and the reranker."""

    sources: Mapping[str, KnowledgeSource]
    models: ChatModels = field(default_factory=ChatModels)
    reranker: Reranker = field(default_factory=PassthroughReranker)

    @classmethod
    def create(
        cls,
        sources: Iterable[KnowledgeSource] | Mapping[str, KnowledgeSource],
        *,
        chat_model: BaseChatModel | str | None = None,
        planning_model: BaseChatModel | str | None = None,
        evidence_model: BaseChatModel | str | None = None,
        answer_model: BaseChatModel | str | None = None,
        reranker: Reranker | None = None,
    ) -> Bindings:
        """Bind sources (names must be unique), chat models by role and a reranker.

        A ``Mapping`` keyed by the sources' names is kept as it is, not copied: the graph reads
        it on every run, so a mapping that changes (a knowledge-base directory's
        :class:`~agentic_retrieval.kb.live.LiveSources`) changes what the runs search.

        Raises:
            ValueError: Two sources share a name.
        """
        return cls(
            sources=sources_by_name(sources),
            models=ChatModels(chat_model, planning_model, evidence_model, answer_model),
            reranker=reranker or PassthroughReranker(),
        )


def sources_by_name(
    sources: Iterable[KnowledgeSource] | Mapping[str, KnowledgeSource],
) -> Mapping[str, KnowledgeSource]:
    """Index sources by name (a mapping already keyed by their names is returned as is).

    Raises:
        ValueError: Two sources share a name.
    """
    if isinstance(sources, Mapping) and all(k == s.name for k, s in sources.items()):
        return sources
    items = list(sources.values()) if isinstance(sources, Mapping) else list(sources)
    by_name: dict[str, KnowledgeSource] = {}
    for source in items:
        if source.name in by_name:
            raise ValueError(f"two knowledge sources are named {source.name!r}")
        by_name[source.name] = source
    return by_name


def allowed_sources(bindings: Bindings, context: Context, params: SourceParams) -> list[str]:
    """Sources this run may query: bound, allowed by the context, named by the caller.

    Raises:
        UnknownKnowledgeSourceError: The caller names a source that is not bound.
    """
    unknown = sorted(set(params) - set(bindings.sources))
    if unknown:
        raise UnknownKnowledgeSourceError(f"unknown knowledge source(s): {', '.join(unknown)}")
    names = list(bindings.sources)
    if context.knowledge_sources is not None:
        names = [n for n in names if n in context.knowledge_sources]
    # naming a source selects it; naming it only to exclude it (neverQuerySource) does not
    # restrict the others
    named = [n for n, p in params.items() if not p.never_query_source]
    if named:
        names = [n for n in names if n in named]
    return [n for n in names if not (n in params and params[n].never_query_source)]
