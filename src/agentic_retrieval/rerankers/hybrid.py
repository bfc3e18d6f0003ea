"""The default reranker without a model: lexical coverage, blended with meaning where it is known.

A source that compared the query's embedding with its passages' (the embedded store's hybrid
search) puts the cosine on each hit (:attr:`~agentic_retrieval.sources.base.Hit.
vector_similarity`). This reranker uses it as it is, embedding nothing again: each such hit
blends ``(1 - w) × lexical + w × vector``, where ``lexical`` is
:class:`~agentic_retrieval.rerankers.lexical.LexicalReranker`'s score and ``vector`` the
cosine mapped onto 0-4 linearly between ``floor`` (0) and ``ceil`` (4), the
:class:`~agentic_retrieval.rerankers.embedding.EmbeddingReranker` calibration for
all-MiniLM-L6-v2. Given ``embeddings`` (any LangChain ``Embeddings``), it embeds the query and
the hits that came without a cosine (an index without vector fields, a LangChain store) and
blends them the same way; without, those hits keep the lexical score.

Why the blend: term coverage gives a paraphrase that answers ("see a doctor who isn't on the
plan's list" for "non-participating providers") a low score however good the passage is, and
it outweighed what the vectors knew. The weight ``w`` (:data:`VECTOR_WEIGHT`) was chosen on
the tuning half of ``benchmarks/relevance_questions.jsonl`` and checked on its other half and
on Cranfield (``benchmarks/README.md``, "Relevance by default").

**Calibrated relevance.** A blend is then mapped onto Azure's scale by
:func:`~agentic_retrieval.rerankers.lexical.calibrate` with the knot :data:`RELEVANCE_KNOT`:
linear through ``(0, 0)``, ``(RELEVANCE_KNOT, 2.5)`` and ``(4, 4)``, so the default
``rerankerThreshold`` (2.5) keeps a hit exactly when its blend reaches the knot. The knot was
fitted on the tuning half of the same question set, answerable questions and questions the
documents cannot answer, as the largest that keeps the answerable questions' evidence recall
within 2% of no cut-off, and checked on the other half (``benchmarks/README.md``, "Calibrated
relevance", refitted in "Relevance on today's defaults" on stores of the OpenVINO model with
English word forms): there it keeps all of that recall and empties the unanswerable questions
far from the documents' subjects (6 of 32), not the near-misses, whose best passages a
bi-encoder's cosine scores as high as answers; no other signal measured there (term coverage,
agreement of the rankings, a sentence's cosine, a model over them) does better. The mapping is
monotone, so it changes no ranking. These scores are calibrated relevance
(:meth:`HybridReranker.calibrated_for`); a hit scored on words alone is not (its coverage says
nothing about a paraphrase), so the default threshold never cuts it. Another embedding model
spreads its cosines differently: pass its ``floor`` and ``ceil``
(``benchmarks/bench_rerankers.py`` measures them) and fit its ``knot``
(``benchmarks/bench_relevance.py --knots``).
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.embeddings import Embeddings

from agentic_retrieval.rerankers.base import MAX_SCORE, clamp_score
from agentic_retrieval.rerankers.embedding import (
    DEFAULT_CEIL,
    DEFAULT_FLOOR,
    EmbeddingReranker,
)
from agentic_retrieval.rerankers.lexical import LexicalReranker, calibrate
from agentic_retrieval.sources.base import Hit

VECTOR_WEIGHT = 0.7
"""Share of a hit's score from its vector similarity, when it has one (see the module doc)."""
RELEVANCE_KNOT = 0.85
"""The blend that calibrates to 2.5, the default threshold (fitted: see the module doc)."""


class HybridReranker:
    """Scores by lexical coverage and rank, blended with the passage's vector similarity.

    Args:
        vector_weight: Share of the score from the vector similarity (0: lexical only).
        floor: Cosine mapped to 0.0.
        ceil: Cosine mapped to 4.0.
        lexical: The lexical reranker blended in (default: :class:`LexicalReranker`).
        knot: The blend calibrated to 2.5 (see the module doc).
        embeddings: Embeds the hits that come without a cosine (``None``: they keep the
            lexical score, which is not calibrated).
    """

    name = "lexical+vector"

    def __init__(
        self,
        vector_weight: float = VECTOR_WEIGHT,
        *,
        floor: float = DEFAULT_FLOOR,
        ceil: float = DEFAULT_CEIL,
        lexical: LexicalReranker | None = None,
        knot: float = RELEVANCE_KNOT,
        embeddings: Embeddings | None = None,
    ) -> None:
        if not 0.0 <= vector_weight <= 1.0:
            raise ValueError(f"vector_weight must be between 0 and 1, not {vector_weight!r}")
        if ceil <= floor:
            raise ValueError(f"ceil ({ceil}) must be greater than floor ({floor})")
        if not 0.0 < knot < MAX_SCORE:
            raise ValueError(f"knot must be between 0 and 4, not {knot!r}")
        self.vector_weight = vector_weight
        self.floor = floor
        self.ceil = ceil
        self.knot = knot
        self.lexical = lexical or LexicalReranker()
        self.embedder = (
            None
            if embeddings is None
            else EmbeddingReranker(embeddings, name="vector", floor=floor, ceil=ceil)
        )

    def calibrated_for(self, hit: Hit) -> bool:
        """A hit's score is calibrated relevance when meaning is part of it (a cosine)."""
        has_cosine = hit.vector_similarity is not None or self.embedder is not None
        return self.vector_weight > 0 and has_cosine

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return one 0-4 score per hit (see the module docstring)."""
        missing = [hit for hit in hits if hit.vector_similarity is None]
        if self.embedder is None or not missing or self.vector_weight == 0:
            return self.score(query, hits)
        cosines = iter(await self.embedder.cosines(query, missing))
        embedded = [
            hit
            if hit.vector_similarity is not None
            else hit.model_copy(update={"vector_similarity": next(cosines)})
            for hit in hits
        ]
        return self.score(query, embedded)

    def score(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """:meth:`ascore` with the cosines the hits carry (embedding nothing)."""
        lexical = self.lexical.score(query, hits)
        return [
            score if blend is None else calibrate(blend, self.knot)
            for blend, score in zip(self._blend(hits, lexical), lexical, strict=True)
        ]

    def blend(self, query: str, hits: Sequence[Hit]) -> list[float | None]:
        """Each hit's lexical and vector blend before calibration; ``None`` without a cosine."""
        return self._blend(hits, self.lexical.score(query, hits))

    def _blend(self, hits: Sequence[Hit], lexical: Sequence[float]) -> list[float | None]:
        weight = self.vector_weight
        return [
            None
            if hit.vector_similarity is None or weight == 0
            else clamp_score((1 - weight) * score + weight * self.vector(hit.vector_similarity))
            for hit, score in zip(hits, lexical, strict=True)
        ]

    def vector(self, cosine: float) -> float:
        """A cosine on 0-4: linear between ``floor`` and ``ceil``."""
        return clamp_score(MAX_SCORE * (cosine - self.floor) / (self.ceil - self.floor))
