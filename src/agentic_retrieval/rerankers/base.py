"""The reranker protocol: one relevance score per candidate on Azure's 0-4 semantic scale.

The scale is the one Azure AI Search's semantic ranker uses, so a ``rerankerThreshold`` means
the same thing whichever reranker runs:

- 4.0 - the passage answers the query directly and completely
- 3.0 - relevant, answers part of the query
- 2.0 - related to the topic, answers little
- 1.0 - barely related
- 0.0 - irrelevant

Each implementation documents how it maps its native score onto this scale.

A reranker that calls a model may also report the tokens it used: implement
:class:`UsageReportingReranker` (``ascore_with_usage``) and the ``semanticReranker``
activity record carries ``inputTokens`` / ``outputTokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from agentic_retrieval.sources.base import Hit

MIN_SCORE = 0.0
MAX_SCORE = 4.0


@runtime_checkable
class Reranker(Protocol):
    """Scores candidates against the query that retrieved them.

    Attributes:
        name: Shown in the ``semanticReranker`` activity record.
    """

    name: str

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return one score in [0, 4] per hit, in the order of ``hits``."""
        ...


@runtime_checkable
class UsageReportingReranker(Reranker, Protocol):
    """Optional capability: a reranker that reports the tokens each scoring call used."""

    async def ascore_with_usage(
        self, query: str, hits: Sequence[Hit]
    ) -> tuple[list[float], dict[str, int]]:
        """Return :meth:`ascore`'s scores and ``{"inputTokens": n, "outputTokens": m}``."""
        ...


def clamp_score(value: float) -> float:
    """Clamp ``value`` into the 0-4 semantic scale."""
    return max(MIN_SCORE, min(MAX_SCORE, float(value)))
