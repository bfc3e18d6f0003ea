"""Pass a source's own semantic score through, falling back to another reranker.

Azure AI Search's semantic ranker already scores hits on the 0-4 scale
(``@search.rerankerScore``); re-scoring them would cost time and change nothing, so hits that
carry :attr:`~agentic_retrieval.sources.base.Hit.reranker_score` keep it (clamped to 0-4).
Hits without one are scored by the fallback (the lexical reranker by default), so a mix of
sources still ranks on one scale.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentic_retrieval.rerankers.base import Reranker, clamp_score
from agentic_retrieval.rerankers.lexical import LexicalReranker
from agentic_retrieval.sources.base import Hit


class PassthroughReranker:
    """Keeps source-provided semantic scores; scores the rest with ``fallback``.

    Args:
        fallback: Reranker for hits without a source score (default: lexical coverage).
    """

    def __init__(self, fallback: Reranker | None = None) -> None:
        self.fallback: Reranker = fallback or LexicalReranker()
        self.name = f"passthrough+{self.fallback.name}"

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return the source's score where present, the fallback's elsewhere."""
        missing = [i for i, h in enumerate(hits) if h.reranker_score is None]
        scores = [clamp_score(h.reranker_score or 0.0) for h in hits]
        if missing:
            fallback = await self.fallback.ascore(query, [hits[i] for i in missing])
            for index, score in zip(missing, fallback, strict=True):
                scores[index] = clamp_score(score)
        return scores
