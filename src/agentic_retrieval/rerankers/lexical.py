"""The default reranker when no model is available: IDF-weighted query-term coverage.

Mapping to the 0-4 scale: ``4 × coverage``, where coverage is the share of the query's
IDF weight (IDF computed over the candidate set, so rare, specific terms count most) whose
terms occur in the candidate's title or content, with a small bonus for terms that occur in
the title. A passage containing every distinctive query term scores near 4; one sharing only
common words scores near 0. It needs no model and is deterministic, so it is a sensible
floor; the embedding, cross-encoder and LLM rerankers judge meaning, not words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agentic_retrieval.rerankers.base import clamp_score
from agentic_retrieval.sources.base import Hit
from agentic_retrieval.text import token_set, tokenize

TITLE_BONUS = 0.15
"""Share of a term's weight added when it occurs in the title."""


class LexicalReranker:
    """Scores candidates by IDF-weighted coverage of the query terms."""

    name = "lexical-coverage"

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return one 0-4 score per hit (see the module docstring for the mapping)."""
        return self.score(query, hits)

    def score(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Synchronous :meth:`ascore`."""
        terms = sorted(set(tokenize(query)))
        if not terms or not hits:
            return [0.0] * len(hits)
        bodies = [token_set(h.content) for h in hits]
        titles = [token_set(h.title or "") for h in hits]
        n = len(hits)
        weights = {}
        for term in terms:
            df = sum(
                1 for body, title in zip(bodies, titles, strict=True)
                if term in body or term in title
            )
            # +1 smoothing keeps a term every candidate shares from weighing zero
            weights[term] = math.log(1 + (n + 1) / (df + 0.5))
        total = sum(weights.values())
        scores = []
        for body, title in zip(bodies, titles, strict=True):
            covered = sum(w for t, w in weights.items() if t in body or t in title)
            bonus = sum(w for t, w in weights.items() if t in title) * TITLE_BONUS
            scores.append(clamp_score(4.0 * min(1.0, (covered + bonus) / total)))
        return scores
