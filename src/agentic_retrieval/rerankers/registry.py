"""Rerankers by name, so servers, the command line and Studio can choose one from config.

``$AGENTIC_RETRIEVAL_RERANKER`` (or ``reranker=`` where a name is accepted) selects one of
:data:`RERANKER_NAMES`; code that builds a :class:`~agentic_retrieval.KnowledgeBase` itself
passes any :class:`~agentic_retrieval.rerankers.base.Reranker` object instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from agentic_retrieval.errors import UnknownRerankerError
from agentic_retrieval.rerankers.base import Reranker
from agentic_retrieval.rerankers.lexical import LexicalReranker
from agentic_retrieval.rerankers.passthrough import PassthroughReranker

RERANKER_ENV_VAR = "AGENTIC_RETRIEVAL_RERANKER"


def _embedding() -> Reranker:
    from agentic_retrieval.embeddings import local_embeddings
    from agentic_retrieval.rerankers.embedding import EmbeddingReranker

    return EmbeddingReranker(local_embeddings())


def _passthrough_embedding() -> Reranker:
    return PassthroughReranker(fallback=_embedding())


def _hybrid_embedding() -> Reranker:
    from agentic_retrieval.embeddings import local_embeddings
    from agentic_retrieval.rerankers.hybrid import HybridReranker

    return PassthroughReranker(fallback=HybridReranker(embeddings=local_embeddings()))


RERANKERS: dict[str, Callable[[], Reranker]] = {
    "default": PassthroughReranker,
    "lexical": LexicalReranker,
    "embedding": _passthrough_embedding,
    "hybrid": _hybrid_embedding,
}
"""``default``: a source's own semantic score, else lexical coverage blended with the vector
similarity a hybrid source computed (no model to load; calibrated relevance where a hit has
one). ``lexical``: lexical coverage for every hit. ``embedding``: a source's own semantic
score, else the offline all-MiniLM-L6-v2 embedding reranker, which embeds every candidate
again (the ``[local]`` extra). ``hybrid``: ``default``, and the candidates of a source that
holds no vectors are embedded with the offline model at query time, so they are judged
(calibrated) too; it costs a model call per query (``benchmarks/README.md``, "Calibrated
relevance")."""

RERANKER_NAMES = tuple(RERANKERS)


def reranker_by_name(name: str | None = None) -> Reranker:
    """Build the reranker called ``name``.

    ``None`` means ``$AGENTIC_RETRIEVAL_RERANKER``, else ``default``.

    Raises:
        UnknownRerankerError: An unknown name (the message lists the known ones).
        MissingDependencyError: The reranker needs an extra that is not installed (named in
            the message; an ``ImportError``).
    """
    chosen = (name or os.environ.get(RERANKER_ENV_VAR) or "default").strip().lower()
    factory = RERANKERS.get(chosen)
    if factory is None:
        raise UnknownRerankerError(
            f"unknown reranker {chosen!r}: choose one of {', '.join(RERANKER_NAMES)} "
            f"(${RERANKER_ENV_VAR})"
        )
    return factory()
