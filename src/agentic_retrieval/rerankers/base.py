"""The reranker protocol: one relevance score per candidate on Azure's 0-4 semantic scale.

The scale is the one Azure AI Search's semantic ranker uses, so a ``rerankerThreshold`` means
the same thing whichever reranker runs:

- 4.0 - the passage answers the query directly and completely
- 3.0 - relevant, answers part of the query
- 2.0 - related to the topic, answers little
- 1.0 - barely related
- 0.0 - irrelevant

Each implementation documents how it maps its native score onto this scale.

Each reranker also declares whether its scores are *calibrated relevance*: whether a score
says how well a passage answers, as measured on held-out labelled data (Azure's semantic
ranker, a cross-encoder, an LLM grader), or only orders candidates (term overlap, which gives
a paraphrase that answers a low score however good it is). The default ``rerankerThreshold``
applies to calibrated scores only (see :func:`calibration_of`); an explicit threshold
applies to every score. A reranker declares it with a ``calibrated`` attribute, or, when it
mixes kinds of score (passing Azure's through, scoring the rest itself), with a
``calibrated_for(hit)`` method. One that declares nothing is taken at its word: the protocol
asks for Azure's scale, meaning included.

A reranker that calls a model may also report the tokens it used: implement
:class:`UsageReportingReranker` (``ascore_with_usage``) and the ``semanticReranker``
activity record carries ``inputTokens`` / ``outputTokens``; one whose calibration depends
on how a call went implements :class:`ReportingReranker` (``ascore_reported``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


@runtime_checkable
class MixedCalibrationReranker(Reranker, Protocol):
    """Optional capability: a reranker whose scores are calibrated for some hits only."""

    def calibrated_for(self, hit: Hit) -> bool:
        """Whether the score this reranker gives ``hit`` is calibrated relevance."""
        ...


@dataclass(frozen=True, slots=True)
class ScoreReport:
    """What one scoring call found: scores, tokens, and which scores are calibrated."""

    scores: list[float]
    usage: dict[str, int]
    calibrated: list[bool]
    """Per hit: whether its score is calibrated relevance in THIS call (a grader that fell
    back to another reranker for part of the hits says so for those)."""


@runtime_checkable
class ReportingReranker(Reranker, Protocol):
    """Optional capability: a reranker that says, call by call, which scores are calibrated.

    For a reranker whose calibration depends on how a call went (the LLM grader scores a
    batch with its fallback after two unusable answers); the rerank node prefers this over
    :func:`calibration_of` and ``ascore_with_usage``.
    """

    async def ascore_reported(self, query: str, hits: Sequence[Hit]) -> ScoreReport:
        """Score ``hits`` and report usage and calibration per hit."""
        ...


def calibration_of(reranker: Reranker, hits: Sequence[Hit]) -> list[bool]:
    """Whether each hit's score from ``reranker`` is calibrated relevance (see the module doc).

    ``calibrated_for(hit)`` when the reranker has it, else its ``calibrated`` attribute, else
    ``True``.
    """
    if isinstance(reranker, MixedCalibrationReranker):
        return [bool(reranker.calibrated_for(hit)) for hit in hits]
    return [bool(getattr(reranker, "calibrated", True))] * len(hits)
