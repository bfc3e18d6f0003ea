"""LLM grader: a chat model grades passages 0-4 through structured output, in batches.

Two modes:

- ``listwise`` (default): one call per batch of ``batch_size`` passages; the model sees the
  batch side by side (ids ``p1``, ``p2``...) and returns one grade per id
  (:class:`ListwiseGrades`). Cheaper, and grades are consistent within a batch.
- ``pointwise``: one call per passage (:class:`PointwiseGrade`); slower and more tokens, but
  no passage is judged relative to its neighbours.

Calls run concurrently, at most ``max_concurrency`` at a time.

Mapping to the 0-4 scale: the model is asked for the semantic-ranker scale itself
(:data:`GRADE_SCALE`), so its grade is used as is, clamped to [0, 4]; fractional grades are
allowed. A passage missing from the model's answer scores 0.0 and a warning is logged; ids
the model invents are ignored.

Failure behaviour: each call is a
:func:`~agentic_retrieval.llm.chat_models.structured_call`: if it raises or its output does not
parse, it is retried once. If the retry fails too, that
batch is scored by ``fallback`` (another :class:`~agentic_retrieval.rerankers.base.Reranker`,
e.g. the lexical one) when one was given, else :class:`RerankError` is raised. The grader's
own scores count as calibrated relevance (the default threshold applies); a batch scored by
the fallback counts as the fallback's scores do (the lexical reranker's do not, so the
default threshold does not cut them): :meth:`LLMGraderReranker.ascore_reported` says which.

Token usage: :meth:`LLMGraderReranker.ascore_with_usage` returns the scores and
``{"inputTokens": ..., "outputTokens": ...}`` summed over every call of that invocation
(failed attempts included, since they are paid for), read from the messages'
``usage_metadata``; :attr:`LLMGraderReranker.last_usage` keeps the latest figures.

The prompts are the module constants :data:`LISTWISE_GRADER_PROMPT` and
:data:`POINTWISE_GRADER_PROMPT`; pass ``prompt=`` to override.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from agentic_retrieval.errors import RerankError
from agentic_retrieval.llm.chat_models import Usage, structured_call
from agentic_retrieval.llm.prompts import (
    LISTWISE_GRADER_PROMPT,
    POINTWISE_GRADER_PROMPT,
)
from agentic_retrieval.rerankers.base import Reranker, ScoreReport, calibration_of, clamp_score
from agentic_retrieval.sources.base import Hit

logger = logging.getLogger(__name__)


class PassageGrade(BaseModel):
    """The grade of one passage."""

    id: str = Field(description="The passage id exactly as given, e.g. p3.")
    grade: float = Field(description="0 (irrelevant) to 4 (answers the query completely).")


class ListwiseGrades(BaseModel):
    """Grades for every passage in the list."""

    grades: list[PassageGrade] = Field(description="One entry per passage id.")


class PointwiseGrade(BaseModel):
    """The grade of the single passage shown."""

    grade: float = Field(description="0 (irrelevant) to 4 (answers the query completely).")


class LLMGraderReranker:
    """Grades hits with a chat model on the 0-4 scale (see the module docstring).

    Args:
        model: A chat model that supports ``with_structured_output`` (tool calling).
        mode: ``"listwise"`` (one call per batch) or ``"pointwise"`` (one call per passage).
        batch_size: Passages per listwise call.
        name: Shown in the ``semanticReranker`` activity record.
        fallback: Scores a batch whose output fails to parse twice; ``None`` raises
            :class:`RerankError` instead.
        max_concurrency: Model calls in flight at once.
        max_chars: Passage text is cut to this many characters in the prompt.
        prompt: The system prompt (default: the module constant for ``mode``).

    """

    calibrated = True
    """The model grades on the scale itself: the default threshold applies (a batch scored by
    ``fallback`` after two unusable answers counts as the fallback's scores do, reported per
    call by :meth:`ascore_reported`)."""

    def __init__(
        self,
        model: BaseChatModel,
        *,
        mode: Literal["listwise", "pointwise"] = "listwise",
        batch_size: int = 10,
        name: str | None = None,
        fallback: Reranker | None = None,
        max_concurrency: int = 4,
        max_chars: int = 1500,
        prompt: str | None = None,
    ) -> None:
        if mode not in ("listwise", "pointwise"):
            raise ValueError(f"mode must be 'listwise' or 'pointwise', not {mode!r}")
        if batch_size < 1 or max_concurrency < 1:
            raise ValueError("batch_size and max_concurrency must be at least 1")
        self.model = model
        self.mode = mode
        self.batch_size = batch_size if mode == "listwise" else 1
        self.name = name or f"llm-grader-{mode}"
        self.fallback = fallback
        self.max_concurrency = max_concurrency
        self.max_chars = max_chars
        default = LISTWISE_GRADER_PROMPT if mode == "listwise" else POINTWISE_GRADER_PROMPT
        self.prompt = prompt or default
        self._schema: type[BaseModel] = ListwiseGrades if mode == "listwise" else PointwiseGrade
        self.last_usage: dict[str, int] = {"inputTokens": 0, "outputTokens": 0}

    async def ascore(self, query: str, hits: Sequence[Hit]) -> list[float]:
        """Return one 0-4 grade per hit."""
        scores, _ = await self.ascore_with_usage(query, hits)
        return scores

    async def ascore_with_usage(
        self, query: str, hits: Sequence[Hit]
    ) -> tuple[list[float], dict[str, int]]:
        """Return the grades and the tokens this call used.

        Returns:
            The grades, in the order of ``hits``, and ``{"inputTokens", "outputTokens"}``.

        Raises:
            RerankError: A batch failed twice and there is no fallback reranker.

        """
        report = await self.ascore_reported(query, hits)
        return report.scores, report.usage

    async def ascore_reported(self, query: str, hits: Sequence[Hit]) -> ScoreReport:
        """Return the grades, the tokens this call used, and which grades are the model's.

        Raises:
            RerankError: A batch failed twice and there is no fallback reranker.

        """
        batches = [hits[i : i + self.batch_size] for i in range(0, len(hits), self.batch_size)]
        gate = asyncio.Semaphore(self.max_concurrency)
        results = await asyncio.gather(*(self._grade_batch(query, b, gate) for b in batches))
        scores = [score for batch_scores, _, _ in results for score in batch_scores]
        calibrated = [flag for _, _, flags in results for flag in flags]
        used = sum((u for _, u, _ in results), Usage())
        self.last_usage = {"inputTokens": used.input_tokens, "outputTokens": used.output_tokens}
        return ScoreReport(scores, dict(self.last_usage), calibrated)

    async def _grade_batch(
        self, query: str, batch: Sequence[Hit], gate: asyncio.Semaphore
    ) -> tuple[list[float], Usage, list[bool]]:
        ids = [f"p{i + 1}" for i in range(len(batch))]
        messages = [SystemMessage(self.prompt), HumanMessage(self._render(query, batch, ids))]
        async with gate:
            result = await structured_call(self.model, self._schema, messages)
        if result.value is not None:
            return self._read(result.value, ids), result.usage, [True] * len(batch)
        cause = result.cause
        problem = f"{type(cause).__name__}: {cause}" if cause is not None else result.error
        if self.fallback is None:
            raise RerankError(f"{self.name}: grader output unusable after a retry: {problem}")
        logger.warning("%s: scoring %d passages with %s", self.name, len(batch), self.fallback.name)
        scores = [clamp_score(s) for s in await self.fallback.ascore(query, batch)]
        return scores, result.usage, calibration_of(self.fallback, batch)

    def _render(self, query: str, batch: Sequence[Hit], ids: list[str]) -> str:
        parts = [f"Query: {query}", ""]
        for pid, hit in zip(ids, batch, strict=True):
            title = f" {hit.title}" if hit.title else ""
            parts.append(f"[{pid}]{title}\n{hit.content[: self.max_chars]}\n")
        return "\n".join(parts)

    def _read(self, parsed: BaseModel, ids: list[str]) -> list[float]:
        if isinstance(parsed, PointwiseGrade):
            return [clamp_score(parsed.grade)]
        grades: dict[str, float] = {}
        for item in getattr(parsed, "grades", []):
            pid = item.id.strip().strip("[]")
            grades.setdefault(pid, clamp_score(item.grade))
        unknown = sorted(set(grades) - set(ids))
        missing = [pid for pid in ids if pid not in grades]
        if unknown:
            logger.warning("%s: ignoring grades for unknown ids %s", self.name, unknown)
        if missing:
            logger.warning("%s: no grade for %s; scoring them 0", self.name, missing)
        return [grades.get(pid, 0.0) for pid in ids]
