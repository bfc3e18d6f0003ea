"""Query-term coverage blended with rank: the lexical part of the default reranker.

:class:`~agentic_retrieval.rerankers.hybrid.HybridReranker` blends it with vector similarity
where a source computed one; alone, it is the ``lexical`` reranker.

Mapping to the 0-4 scale, in two steps. The *blend* is ``4 × ((1 - r) × coverage + r × k /
(k + rank))``, where ``rank``
is the candidate's position in its own source's result list (0 = the source's best hit;
sources rank on different scales, so positions, not scores, are compared), ``k = 10`` and the
rank weight ``r = 0.3``. The source's ranking (BM25, or BM25 and vectors fused) knows
things coverage does not, such as term proximity and meaning; measured on the shared
documents (``benchmarks/README.md``), the blend beats either signal alone.

``coverage`` is ``Σ w·m / Σ w`` over the query's distinct terms (the first
``MAX_QUERY_TERMS``, 64, so a pasted document costs no more than a long question), where ``w`` is
the term's IDF within the candidate set (rare, specific terms count most) and ``m`` how well
the candidate matches it: ``0.7 + 0.3 × s`` when the term is in the passage text, with ``s``
a BM25-style saturation of its frequency normalised by passage length (so a passage about the
term beats one that mentions it once among much else); ``0.5`` when the term is only in the
title (chunks of one document share its title, so a title match alone says little about the
chunk); ``0`` otherwise. A passage containing every distinctive query term that its source
ranks first blends to 3.3-4; one sharing only common words, ranked low, near 0.

The blend orders candidates; ``calibrate()`` then maps it onto Azure's scale with two linear
pieces through ``(0, 0)``, ``(CALIBRATION_KNOT, 2.5)`` and ``(4, 4)``, the knot fitted on
questions that share the documents' words (``benchmarks/bench_calibration.py``): there the
answering passage scores a median of about 3.2, the best candidate of a question the corpus
cannot answer about 2.2. The ``auto`` effort's ``auto_min_top_score`` reads that scale.
Calibration is monotone, so the ranking is the blend's.

The scores are **not calibrated relevance** (``calibrated = False``): a paraphrase shares few
words with the passage that answers it, so its coverage is low however good the passage is
(measured on paraphrased held-out questions, ``benchmarks/README.md``, "Relevance by
default"). The default ``rerankerThreshold`` therefore does not apply to them; an explicit one
does.

It needs no model and is deterministic: a sensible floor. The embedding, cross-encoder and
LLM rerankers judge meaning, not words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agentic_retrieval.rerankers.base import clamp_score
from agentic_retrieval.sources.base import Hit
from agentic_retrieval.text import query_terms, token_counts, token_set

IN_TEXT = 0.7
"""Match credit for a term present in the passage text (plus up to 0.3 for frequency)."""
TITLE_ONLY = 0.5
"""Match credit for a term present only in the title."""
K1, B = 1.2, 0.75
"""BM25 saturation constants for the frequency part."""
RANK_WEIGHT = 0.3
RANK_K = 10
CALIBRATION_KNOT = 2.10
"""The blend that calibrates to :data:`CALIBRATED_THRESHOLD` (measured: see the module doc)."""
CALIBRATED_THRESHOLD = 2.5


class LexicalReranker:
    """Scores candidates by query-term coverage blended with their source's ranking.

    Args:
        rank_weight: Share of the score from the source's rank (0 = coverage only).
    """

    name = "lexical-coverage"
    calibrated = False
    """Term overlap orders candidates but cannot tell that a paraphrase answers."""

    def __init__(self, rank_weight: float = RANK_WEIGHT) -> None:
        if not 0.0 <= rank_weight <= 1.0:
            raise ValueError(f"rank_weight must be between 0 and 1, not {rank_weight!r}")
        self.rank_weight = rank_weight

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return one 0-4 score per hit (see the module docstring for the mapping)."""
        return self.score(query, hits)

    def score(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Synchronous :meth:`ascore`: the calibrated blend."""
        return [calibrate(value) for value in self.blend(query, hits)]

    def blend(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """The uncalibrated coverage and rank blend on 0-4 (it orders like :meth:`score`)."""
        coverage = self.coverage(query, hits)
        ranks = _source_ranks(hits)
        weight = self.rank_weight
        return [
            clamp_score(4.0 * ((1 - weight) * c / 4.0 + weight * RANK_K / (RANK_K + rank)))
            for c, rank in zip(coverage, ranks, strict=True)
        ]

    def coverage(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """The coverage part alone, on the 0-4 scale."""
        terms = sorted(query_terms(query))
        if not terms or not hits:
            return [0.0] * len(hits)
        bodies = [token_counts(h.content) for h in hits]
        titles = [token_set(h.title or "") for h in hits]
        lengths = [sum(body.values()) for body in bodies]
        average = (sum(lengths) / len(lengths)) or 1.0
        n = len(hits)
        weights = {}
        for term in terms:
            df = sum(
                1
                for body, title in zip(bodies, titles, strict=True)
                if term in body or term in title
            )
            # +1 smoothing keeps a term every candidate shares from weighing zero
            weights[term] = math.log(1 + (n + 1) / (df + 0.5))
        total = sum(weights.values())
        scores = []
        for body, title, length in zip(bodies, titles, lengths, strict=True):
            norm = K1 * (1 - B + B * length / average)
            matched = 0.0
            for term, weight in weights.items():
                tf = body.get(term, 0)
                if tf:
                    matched += weight * (IN_TEXT + (1 - IN_TEXT) * tf / (tf + norm))
                elif term in title:
                    matched += weight * TITLE_ONLY
            scores.append(clamp_score(4.0 * matched / total))
        return scores


def calibrate(blend: float, knot: float = CALIBRATION_KNOT) -> float:
    """Map a blend onto Azure's scale: linear through (0, 0), (knot, 2.5) and (4, 4)."""
    blend = clamp_score(blend)
    if blend <= knot:
        return CALIBRATED_THRESHOLD * blend / knot
    top = 4.0 - CALIBRATED_THRESHOLD
    return clamp_score(CALIBRATED_THRESHOLD + top * (blend - knot) / (4.0 - knot))


def _source_ranks(hits: Sequence[Hit]) -> list[int]:
    """Each hit's position among the hits of the same source, by the source's own score."""
    by_source: dict[str, list[int]] = {}
    for index, hit in enumerate(hits):
        by_source.setdefault(hit.source, []).append(index)
    ranks = [0] * len(hits)
    for indexes in by_source.values():
        ordered = sorted(indexes, key=lambda i: (-hits[i].score, i))
        for rank, index in enumerate(ordered):
            ranks[index] = rank
    return ranks
