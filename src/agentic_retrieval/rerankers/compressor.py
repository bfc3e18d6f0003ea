"""Adapter for any LangChain ``BaseDocumentCompressor`` (cross-encoders, FlashRank, Cohere...).

The hits go to the compressor as ``Document``s whose metadata carries the hit's position
(under :data:`INDEX_KEY`); the compressor returns the documents it keeps, usually with a
``relevance_score`` in their metadata. Each returned document is matched back to its hit by
that index (or, when a compressor rebuilds metadata, by identical text).

Mapping to the 0-4 scale (``score_range``):

- ``"probability"`` (default): the native score is a probability in [0, 1] (FlashRank,
  Cohere Rerank, Jina, a cross-encoder with a sigmoid head): ``4 × score``.
- ``"logit"``: the native score is an unbounded logit (a raw cross-encoder such as
  ``ms-marco-MiniLM-L-6-v2``): ``4 × sigmoid(score)``, so a logit of 0 maps to 2.0.
- ``(low, high)``: any other bounded range, mapped linearly: ``low`` → 0, ``high`` → 4.

Results are clamped to [0, 4]. Documents the compressor drops (for example beyond its own
``top_n``) score 0.0. A compressor that keeps documents but reports no score at all (LangChain's
``CrossEncoderReranker`` only reorders) is scored by rank: of ``k`` returned documents the one
at rank ``r`` (0-based) gets ``4 × (k - r) / k``; a score missing on only some documents
counts as 0.0.

Calibration: a compressor's own relevance score (a cross-encoder's, Cohere's, FlashRank's)
counts as calibrated relevance, so the default threshold applies to it; scores by rank only
order the documents, so it does not (:meth:`CompressorReranker.calibrated_for`). Pass
``calibrated=`` to say otherwise for a compressor whose scores you have measured.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.documents import Document

from agentic_retrieval.rerankers.base import MAX_SCORE, clamp_score
from agentic_retrieval.sources.base import Hit

INDEX_KEY = "_agentic_retrieval_index"
"""Metadata key holding the hit's position in the list being scored."""

ScoreRange = Literal["probability", "logit"] | tuple[float, float]


class CompressorReranker:
    """Scores hits with a LangChain document compressor.

    Args:
        compressor: A ``BaseDocumentCompressor`` (or any object with ``acompress_documents`` or
            ``compress_documents(documents, query)``).
        name: Shown in the ``semanticReranker`` activity record (default: the compressor's
            class name).
        score_range: How the native score maps to 0-4 (see the module docstring).
        score_key: The metadata key holding the native score.
        calibrated: Whether the scores are calibrated relevance (``None``: when the compressor
            reports scores of its own, as the last call showed).

    """

    def __init__(
        self,
        compressor: Any,
        *,
        name: str | None = None,
        score_range: ScoreRange = "probability",
        score_key: str = "relevance_score",
        calibrated: bool | None = None,
    ) -> None:
        if isinstance(score_range, tuple) and score_range[1] <= score_range[0]:
            raise ValueError(f"score_range must be (low, high) with low < high: {score_range}")
        self.compressor = compressor
        self.name = name or f"compressor:{type(compressor).__name__}"
        self.score_range = score_range
        self.score_key = score_key
        self.calibrated = calibrated
        self._reported_scores: bool | None = None

    def calibrated_for(self, hit: Hit) -> bool:
        """Whether this compressor's scores are calibrated relevance (see the module doc)."""
        if self.calibrated is not None:
            return self.calibrated
        return self._reported_scores is not False

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return one 0-4 score per hit (see the module docstring for the mapping)."""
        if not hits:
            return []
        documents = [to_document(hit, index) for index, hit in enumerate(hits)]
        returned = await self._compress(documents, query)
        return self._scores(list(returned), documents)

    async def _compress(self, documents: list[Document], query: str) -> Sequence[Document]:
        acompress = getattr(self.compressor, "acompress_documents", None)
        if acompress is not None:
            compressed: Sequence[Document] = await acompress(documents, query)
            return compressed
        # a sync-only compressor would block the event loop the other searches share
        return await asyncio.to_thread(self.compressor.compress_documents, documents, query)

    def _scores(self, returned: list[Document], sent: list[Document]) -> list[float]:
        scores = [0.0] * len(sent)
        by_text = {doc.page_content: i for i, doc in reversed(list(enumerate(sent)))}
        has_score = any(self.score_key in doc.metadata for doc in returned)
        if returned:  # a compressor either reports scores or only reorders: it is its nature
            self._reported_scores = has_score
        for rank, doc in enumerate(returned):
            index = doc.metadata.get(INDEX_KEY, by_text.get(doc.page_content))
            if not isinstance(index, int) or not 0 <= index < len(sent):
                continue
            if has_score:
                native = doc.metadata.get(self.score_key)
                value = 0.0 if native is None else self.to_scale(float(native))
            else:
                value = MAX_SCORE * (len(returned) - rank) / len(returned)
            scores[index] = max(scores[index], value)
        return scores

    def to_scale(self, native: float) -> float:
        """Map one native score onto 0-4 according to ``score_range``."""
        if self.score_range == "probability":
            return clamp_score(MAX_SCORE * native)
        if self.score_range == "logit":
            return clamp_score(MAX_SCORE * sigmoid(native))
        low, high = self.score_range
        return clamp_score(MAX_SCORE * (native - low) / (high - low))


def to_document(hit: Hit, index: int) -> Document:
    """Build the ``Document`` sent to the compressor: title and content, index in metadata."""
    text = f"{hit.title}\n{hit.content}" if hit.title else hit.content
    metadata = {**hit.metadata, "doc_key": hit.doc_key, INDEX_KEY: index}
    return Document(page_content=text, metadata=metadata)


def sigmoid(value: float) -> float:
    """Numerically stable logistic function."""
    if value >= 0:
        return 1.0 / (1.0 + math.exp(-value))
    exp = math.exp(value)
    return exp / (1.0 + exp)
