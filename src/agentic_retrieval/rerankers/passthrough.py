"""Pass a source's own semantic score through, falling back to another reranker.

Azure AI Search's semantic ranker already scores hits on the 0-4 scale
(``@search.rerankerScore``); re-scoring them would cost time and change nothing, so hits that
carry :attr:`~agentic_retrieval.sources.base.Hit.reranker_score` keep it (clamped to 0-4).
Hits without one are scored by the fallback (:class:`~agentic_retrieval.rerankers.hybrid.
HybridReranker` by default: lexical coverage, blended with the vector similarity a hybrid
source computed), so a mix of sources still ranks on one scale.

Azure's scores are calibrated relevance; the fallback's are only if it says so
(:meth:`PassthroughReranker.calibrated_for`), so the default threshold drops an
Azure-scored hit under 2.5 and keeps the fallback-scored ones of the same request.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentic_retrieval.rerankers.base import Reranker, calibration_of, clamp_score
from agentic_retrieval.rerankers.hybrid import HybridReranker
from agentic_retrieval.sources.base import Hit


class PassthroughReranker:
    """Keeps source-provided semantic scores; scores the rest with ``fallback``.

    Args:
        fallback: Reranker for hits without a source score (default: lexical coverage blended
            with the source's vector similarity, :class:`HybridReranker`).
    """

    def __init__(self, fallback: Reranker | None = None) -> None:
        self.fallback: Reranker = fallback or HybridReranker()
        self.name = f"passthrough+{self.fallback.name}"

    def calibrated_for(self, hit: Hit) -> bool:
        """A source's own semantic score is calibrated; the fallback's is if it says so."""
        return hit.reranker_score is not None or calibration_of(self.fallback, [hit])[0]

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return the source's score where present, the fallback's elsewhere."""
        missing = [i for i, h in enumerate(hits) if h.reranker_score is None]
        scores = [clamp_score(h.reranker_score or 0.0) for h in hits]
        if missing:
            fallback = await self.fallback.ascore(query, [hits[i] for i in missing])
            for index, score in zip(missing, fallback, strict=True):
                scores[index] = clamp_score(score)
        return scores
