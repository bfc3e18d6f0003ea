"""Ask every question of one configuration and record what came back, question by question.

A question that fails (a bad request, a crash inside the pipeline) is recorded with its
error and scores 0 on the IR metrics; it is never skipped. A partial response (a source
failed, the time limit elapsed) is scored on what it returned, with the source errors kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentic_retrieval.context import Context
from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.eval.configurations import Configuration
from agentic_retrieval.eval.datasets import Question
from agentic_retrieval.eval.folding import fold
from agentic_retrieval.eval.metrics import citation_check, evidence_found
from agentic_retrieval.eval.pricing import Price, cost
from agentic_retrieval.eval.usage import UsageCounter
from agentic_retrieval.knowledge_base import KnowledgeBase
from agentic_retrieval.sources.base import GraphKnowledgeSource
from agentic_retrieval.wire.models import RetrieveResponse

logger = logging.getLogger(__name__)

QuestionDone = Callable[[Configuration, "QueryResult"], None]


@dataclass
class QueryResult:
    """What one configuration returned for one question."""

    question_id: str
    documents: list[str] = field(default_factory=list)
    """Document keys in rank order (chunks folded, first occurrence)."""
    chunks: int = 0
    latency_ms: float = 0.0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    source_queries: int = 0
    cost: float | None = None
    status: int | None = None
    error: str | None = None
    """Why the question failed (then it scores 0)."""
    source_errors: list[str] = field(default_factory=list)
    evidence: list[bool] | None = None
    """For each evidence string of the question, whether the retrieved text contains it."""
    citations: dict[str, Any] | None = None
    answer: str | None = None
    unpriced: list[str] = field(default_factory=list)
    graph_searches: int = 0
    """Graph searches run (``graphSearch`` records)."""
    graph_queries: int = 0
    """Of those, the ones answered by a model-written query (``outcome: Success``)."""
    graph_attempts: int = 0
    """Model calls made for graph queries, over every graph search."""
    graph_errors: int = 0
    """Graph searches that failed (an ``error`` in the record)."""
    graph_evidence: list[bool] | None = None
    """For each evidence string, whether the graph search's own references hold it."""

    @property
    def evidence_recall(self) -> float | None:
        """Share of the evidence strings found (``None`` without evidence)."""
        return sum(self.evidence) / len(self.evidence) if self.evidence else None

    @property
    def graph_evidence_recall(self) -> float | None:
        """Share of the evidence strings in the graph's own references (``None``: no graph)."""
        found = self.graph_evidence
        return sum(found) / len(found) if found else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        data = asdict(self)
        data["evidence_recall"] = self.evidence_recall
        data["graph_evidence_recall"] = self.graph_evidence_recall
        return data


GRAPH_PARAMETERS: dict[str, Any] = {"includeQuery": True, "provenance": {"kind": "hydrate"}}
"""What a configuration with ``graph`` asks of every source with an entity graph: the query
it ran (in the activity) and the chunks behind the rows (the evidence that is scored)."""


def build_request(kb: KnowledgeBase, question: Question, graph: bool = False) -> dict[str, Any]:
    """The retrieve request for a question: its turns, and source data on every reference.

    With ``graph``, every source that has an entity graph is also graph-searched.
    """
    request: dict[str, Any] = {
        "messages": [
            {"role": role, "content": [{"type": "text", "text": text}]}
            for role, text in question.messages
            if text.strip()
        ],
        "knowledgeSourceParams": [
            {"knowledgeSourceName": name, "kind": source.kind, "includeReferenceSourceData": True}
            for name, source in kb.sources.items()
        ],
    }
    if graph:
        for params in request["knowledgeSourceParams"]:
            if isinstance(kb.sources[params["knowledgeSourceName"]], GraphKnowledgeSource):
                params["graphParameters"] = GRAPH_PARAMETERS
    return request


async def run_question(
    kb: KnowledgeBase,
    configuration: Configuration,
    question: Question,
    context: Context,
    prices: Mapping[str, Price] | None = None,
) -> QueryResult:
    """Ask one question; never raises for a failing question (the error is recorded)."""
    counter = UsageCounter()
    result = QueryResult(question.id)
    started = time.perf_counter()
    try:
        response = await kb.aretrieve(
            build_request(kb, question, configuration.graph),
            config={"callbacks": [counter]},
            defaults=context,
        )
    except InvalidRequestError as exc:
        result.error = str(exc)
    except Exception as exc:  # one broken question must not end the evaluation
        logger.warning("question %s failed: %s", question.id, exc)
        result.error = f"{type(exc).__name__}: {exc}"
    else:
        _read_response(result, response, question, configuration)
    result.latency_ms = (time.perf_counter() - started) * 1000
    usage = counter.totals()
    result.model_calls = usage.model_calls
    result.input_tokens, result.output_tokens = usage.input_tokens, usage.output_tokens
    result.reasoning_tokens = usage.reasoning_tokens
    if prices is not None:
        result.cost, unpriced = cost(usage.calls, prices)
        result.unpriced = sorted(unpriced)
    return result


async def warm(kb: KnowledgeBase, question: Question, context: Context) -> None:
    """Ask ``question`` once, untimed and model-free, and forget the answer."""
    model_free = dataclasses.replace(
        context, reasoning_effort="minimal", output_mode="extractiveData"
    )
    try:
        await kb.aretrieve(build_request(kb, question), defaults=model_free)
    except Exception as exc:  # the timed run records the question's own failure
        logger.debug("warm-up question %s failed: %s", question.id, exc)


def _read_response(
    result: QueryResult,
    response: RetrieveResponse,
    question: Question,
    configuration: Configuration,
) -> None:
    references = response.references
    result.status = response.status_code
    result.documents = fold(references)
    result.chunks = len(references)
    for record in response.activity or []:
        data = record.model_dump(by_alias=True, exclude_none=True)
        if "knowledgeSourceName" in data:
            result.source_queries += 1
        if record.error is not None:
            result.source_errors.append(f"{record.type}: {record.error.message}")
        if record.type == "graphSearch":
            _count_graph_search(result, data)
    if question.evidence:
        retrieved = "\n".join(str((r.source_data or {}).get("content", "")) for r in references)
        result.evidence = evidence_found(question.evidence, retrieved)
        if result.graph_searches:
            from_graph = [r for r in references if r.type == "graphSearch"]
            text = "\n".join(str((r.source_data or {}).get("content", "")) for r in from_graph)
            result.graph_evidence = evidence_found(question.evidence, text)
    if configuration.output_mode == "answerSynthesis":
        result.answer = response.text
        result.citations = citation_check(response.text, [r.id for r in references])


def _count_graph_search(result: QueryResult, record: dict[str, Any]) -> None:
    """Add one ``graphSearch`` record to the question's graph activity."""
    arguments = record.get("graphSearchArguments") or {}
    result.graph_searches += 1
    result.graph_attempts += int(arguments.get("attempts") or 0)
    if "error" in record:
        result.graph_errors += 1
    elif arguments.get("outcome") == "Success":
        result.graph_queries += 1


async def run_configuration(
    kb: KnowledgeBase,
    configuration: Configuration,
    questions: Sequence[Question],
    *,
    prices: Mapping[str, Price] | None = None,
    concurrency: int = 1,
    on_done: QuestionDone | None = None,
    warm_up: bool = True,
) -> list[QueryResult]:
    """Ask every question (``concurrency`` at a time); results in question order.

    With ``warm_up``, the first question is asked once before the timed questions, untimed
    and at the model-free tier (``minimal``, grounding data: no model call, no cost), so the
    configuration's latency leaves out what only its first request pays (opening its stores,
    loading an embedding model, first-use imports) instead of the first configuration of a
    run paying it for all of them.
    """
    context = configuration.context(kb.defaults)
    if warm_up and questions:
        await warm(kb, questions[0], context)
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(question: Question) -> QueryResult:
        async with gate:
            result = await run_question(kb, configuration, question, context, prices)
        if on_done is not None:
            on_done(configuration, result)
        return result

    if concurrency <= 1:  # strictly one after another: latencies without contention
        return [await one(question) for question in questions]
    return list(await asyncio.gather(*(one(q) for q in questions)))
