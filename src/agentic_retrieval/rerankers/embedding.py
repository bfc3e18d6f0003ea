"""Embedding-similarity reranker for any LangChain ``Embeddings``.

The query is embedded with ``aembed_query`` and the passages (title and content) with
``aembed_documents`` in batches, all concurrently; each passage's score is the cosine
similarity between its vector and the query's.

Mapping to the 0-4 scale: a linear calibration between two cosine values,

- ``cos ≤ floor`` → 0.0,
- ``cos ≥ ceil`` → 4.0,
- ``4 × (cos - floor) / (ceil - floor)`` in between.

Cosine similarities of sentence embeddings do not spread over [-1, 1]. The defaults
(``floor=0.20``, ``ceil=0.70``) are chosen for all-MiniLM-L6-v2 from the distribution measured
by ``benchmarks/bench_rerankers.py`` on BM25 top-30 candidates (see
``benchmarks/README.md``): the answering passage had median cosine 0.67 (p10 0.58),
the other candidates median 0.28 (p90 0.43). With this calibration a typical answering passage
scores 3.1-3.8, a typical non-answering candidate about 0.6 and 90% of them stay below 2.0, so
a ``rerankerThreshold`` of 2 separates them as it does with Azure's ranker. Other models need
their own floor and ceil: run the benchmark with the model and read off the same percentiles.

For an offline model, pass ``agentic_retrieval.embeddings.local_embeddings()`` (all-MiniLM-L6-v2
from the ``[local]`` extra).

The scores are not taken as calibrated relevance (``calibrated=False``), so the default
threshold does not cut them: on paraphrased held-out questions (``benchmarks/README.md``,
"Relevance by default") a 2.5 cut-off on MiniLM's scores drops passages that answer. Pass
``calibrated=True`` once a model's mapping is measured to keep answers above 2.5 on held-out
labelled data of your own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
from langchain_core.embeddings import Embeddings

from agentic_retrieval.rerankers.base import MAX_SCORE, clamp_score
from agentic_retrieval.sources.base import Hit

DEFAULT_FLOOR = 0.20
"""Cosine at or below which a passage scores 0 (all-MiniLM-L6-v2)."""
DEFAULT_CEIL = 0.70
"""Cosine at or above which a passage scores 4 (all-MiniLM-L6-v2)."""


class EmbeddingReranker:
    """Scores hits by calibrated cosine similarity to the query.

    Args:
        embeddings: Any LangChain ``Embeddings``.
        name: Shown in the ``semanticReranker`` activity record.
        floor: Cosine mapped to 0.0 (see the module docstring).
        ceil: Cosine mapped to 4.0.
        batch_size: Passages per ``aembed_documents`` call.
        max_chars: Passage text is cut to this many characters before embedding (small
            models truncate at a few hundred tokens anyway).
        calibrated: Whether the scores are calibrated relevance (see the module docstring).

    """

    def __init__(
        self,
        embeddings: Embeddings,
        *,
        name: str = "embedding",
        floor: float = DEFAULT_FLOOR,
        ceil: float = DEFAULT_CEIL,
        batch_size: int = 32,
        max_chars: int = 2000,
        calibrated: bool = False,
    ) -> None:
        if ceil <= floor:
            raise ValueError(f"ceil ({ceil}) must be greater than floor ({floor})")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.embeddings = embeddings
        self.name = name
        self.floor = floor
        self.ceil = ceil
        self.batch_size = batch_size
        self.max_chars = max_chars
        self.calibrated = calibrated

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return one 0-4 score per hit (see the module docstring for the mapping)."""
        return [self.to_scale(cos) for cos in await self.cosines(query, hits)]

    async def cosines(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return the raw cosine similarity of each hit to ``query`` (for calibration)."""
        if not hits:
            return []
        texts = [passage_text(hit)[: self.max_chars] for hit in hits]
        batches = [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        query_task = asyncio.ensure_future(self.embeddings.aembed_query(query))
        batch_vectors: list[list[list[float]]] = await asyncio.gather(
            *(self.embeddings.aembed_documents(batch) for batch in batches)
        )
        query_vector = await query_task
        vectors = [vector for batch in batch_vectors for vector in batch]
        if len(vectors) != len(hits):
            raise ValueError(f"embeddings returned {len(vectors)} vectors for {len(hits)} texts")
        return cosine_similarities(query_vector, vectors)

    def to_scale(self, cosine: float) -> float:
        """Map one cosine similarity onto 0-4 with the floor/ceil calibration."""
        return clamp_score(MAX_SCORE * (cosine - self.floor) / (self.ceil - self.floor))


def passage_text(hit: Hit) -> str:
    """Return the text embedded for a hit: its title (when present) and content."""
    return f"{hit.title}\n{hit.content}" if hit.title else hit.content


def cosine_similarities(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> list[float]:
    """Cosine of each vector with ``query``; a zero vector has similarity 0."""
    q = np.asarray(query, dtype=np.float64)
    m = np.asarray(vectors, dtype=np.float64).reshape(len(vectors), -1)
    norms = np.linalg.norm(m, axis=1) * np.linalg.norm(q)
    dots = m @ q
    safe = np.where(norms > 0, norms, 1.0)
    return [float(x) for x in np.where(norms > 0, dots / safe, 0.0)]
