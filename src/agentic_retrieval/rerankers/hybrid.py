"""The default reranker without a model: lexical coverage, blended with meaning where it is known.

A source that compared the query's embedding with its passages' (the embedded store's hybrid
search) puts the cosine on each hit (:attr:`~agentic_retrieval.sources.base.Hit.
vector_similarity`). This reranker uses it as it is, embedding nothing again: each such hit
scores ``(1 - w) × lexical + w × vector``, where ``lexical`` is
:class:`~agentic_retrieval.rerankers.lexical.LexicalReranker`'s score and ``vector`` the
cosine mapped onto 0-4 linearly between ``floor`` (0) and ``ceil`` (4), the
:class:`~agentic_retrieval.rerankers.embedding.EmbeddingReranker` calibration for
all-MiniLM-L6-v2 (``--embeddings local``). Hits without a similarity (a lexical-only source,
a LangChain retriever) keep the lexical score, so one source's hits rank as before.

Why: term coverage gives a paraphrase that answers ("see a doctor who isn't on the plan's
list" for "non-participating providers") a low score however good the passage is, and it
outweighed what the vectors knew. The weight ``w`` (:data:`VECTOR_WEIGHT`) was chosen on the
tuning half of ``benchmarks/relevance_questions.jsonl`` and checked on its other half and on
Cranfield (``benchmarks/README.md``, "Relevance by default").

The scores order candidates; they are not calibrated relevance (``calibrated = False``): the
lexical part never decides on its own that a passage is irrelevant, so the default threshold
does not apply to them. Another embedding model spreads its cosines differently: pass its
``floor`` and ``ceil`` (``benchmarks/bench_rerankers.py`` measures them).
"""

from __future__ import annotations

from collections.abc import Sequence

from agentic_retrieval.rerankers.base import MAX_SCORE, clamp_score
from agentic_retrieval.rerankers.embedding import DEFAULT_CEIL, DEFAULT_FLOOR
from agentic_retrieval.rerankers.lexical import LexicalReranker
from agentic_retrieval.sources.base import Hit

VECTOR_WEIGHT = 0.7
"""Share of a hit's score from its vector similarity, when it has one (see the module doc)."""


class HybridReranker:
    """Scores by lexical coverage and rank, blended with the source's vector similarity.

    Args:
        vector_weight: Share of the score from the vector similarity (0: lexical only).
        floor: Cosine mapped to 0.0.
        ceil: Cosine mapped to 4.0.
        lexical: The lexical reranker blended in (default: :class:`LexicalReranker`).
    """

    name = "lexical+vector"
    calibrated = False
    """Scores order candidates; the default threshold does not apply to them."""

    def __init__(
        self,
        vector_weight: float = VECTOR_WEIGHT,
        *,
        floor: float = DEFAULT_FLOOR,
        ceil: float = DEFAULT_CEIL,
        lexical: LexicalReranker | None = None,
    ) -> None:
        if not 0.0 <= vector_weight <= 1.0:
            raise ValueError(f"vector_weight must be between 0 and 1, not {vector_weight!r}")
        if ceil <= floor:
            raise ValueError(f"ceil ({ceil}) must be greater than floor ({floor})")
        self.vector_weight = vector_weight
        self.floor = floor
        self.ceil = ceil
        self.lexical = lexical or LexicalReranker()

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return one 0-4 score per hit (see the module docstring)."""
        return self.score(query, hits)

    def score(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Synchronous :meth:`ascore`."""
        weight = self.vector_weight
        return [
            lexical
            if hit.vector_similarity is None
            else clamp_score((1 - weight) * lexical + weight * self.vector(hit.vector_similarity))
            for hit, lexical in zip(hits, self.lexical.score(query, hits), strict=True)
        ]

    def vector(self, cosine: float) -> float:
        """A cosine on 0-4: linear between ``floor`` and ``ceil``."""
        return clamp_score(MAX_SCORE * (cosine - self.floor) / (self.ceil - self.floor))
