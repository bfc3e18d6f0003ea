"""Helpers the nodes share, so that no node imports another node.

The conversation (question, transcript), the run's time budget, the caller's per-source
parameters, source resolution for a round, and the search tasks a round fans out to.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.runtime import Runtime

from agentic_retrieval.context import Context
from agentic_retrieval.graph.events import Searched, complete, emit
from agentic_retrieval.graph.records import (
    Activity,
    AnyActivity,
    ErrorInfo,
    GraphSearchTask,
    ModelCallActivity,
    RetrievedHit,
    SearchTask,
    SourceParams,
    Subquery,
)
from agentic_retrieval.llm.chat_models import StructuredResult, Usage
from agentic_retrieval.odata import and_filters
from agentic_retrieval.sources.base import GraphKnowledgeSource, Hit, KnowledgeSource
from agentic_retrieval.state import RetrievalState, Update
from agentic_retrieval.text import same_words_key

MAX_TRANSCRIPT_CHARS = 12_000
"""Oldest turns are dropped from prompts beyond this many characters."""


def message_text(message: BaseMessage) -> str:
    """The text of a message, whatever its content format."""
    text = message.text
    return str(text) if isinstance(text, str) else str(text())


def last_user_text(messages: Sequence[BaseMessage]) -> str:
    """The last human message's text, or the last message's when there is no human one."""
    for message in reversed(messages):
        if message.type == "human" and message_text(message).strip():
            return message_text(message).strip()
    for message in reversed(messages):
        if message_text(message).strip():
            return message_text(message).strip()
    return ""


def searched_text(state: RetrievalState) -> str:
    """What the latest round searched for.

    The question as asked after the model-free round; the planner's subqueries after a
    planned one (a follow-up's "it" is judged by the words the planner put in its place).
    """
    if state.planned_by != "model" or not state.subqueries:
        return state.question
    latest = max(s.round for s in state.subqueries)
    return " ".join(s.text for s in state.subqueries if s.round == latest)


def searched_sources(state: RetrievalState) -> list[str]:
    """The sources any round searched, sorted."""
    return sorted({name for q in state.subqueries for name in q.sources})


def transcript(messages: Sequence[BaseMessage]) -> str:
    """The conversation as ``role: text`` lines, newest last, bounded in size."""
    lines: list[str] = []
    size = 0
    for message in reversed(messages):
        line = f"{message.type}: {message_text(message).strip()}"
        if size + len(line) > MAX_TRANSCRIPT_CHARS and lines:
            break
        lines.append(line)
        size += len(line)
    return "\n".join(reversed(lines))


def today() -> str:
    """Today's date for prompts (models otherwise guess from their training cut-off)."""
    return dt.date.today().isoformat()


def remaining_seconds(started_at: float | None, context: Context) -> float:
    """Seconds left before ``context.max_runtime_seconds`` elapses for this run."""
    if started_at is None:
        return context.max_runtime_seconds
    return started_at + context.max_runtime_seconds - time.time()


def call_error(result: StructuredResult[Any]) -> ErrorInfo | None:
    """The error of a structured model call that produced no usable value, if any."""
    return ErrorInfo.of(result.error_code, result.error) if result.error else None


def total_usage(entries: Iterable[Activity]) -> Usage:
    """Sum the token counts of every step that called a model."""
    return sum((e.usage for e in entries if isinstance(e, ModelCallActivity)), Usage())


def results_processing(source: str, params: SourceParams, context: Context) -> str:
    """``rerank`` or ``none`` for ``source``: the request's value, else the source's own."""
    given = params[source].results_processing if source in params else None
    if given is not None:
        return given
    return "none" if source in (context.unreranked_sources or []) else "rerank"


def resolve_subqueries(
    planned: Sequence[Subquery], allowed: Sequence[str], always: Sequence[str], limit: int
) -> list[Subquery]:
    """Cap, dedupe and attach sources to ``planned`` subqueries.

    Args:
        planned: Subqueries as planned (``sources`` is the planner's selection, may be empty).
        allowed: Sources the run may use, in binding order.
        always: Sources to add to every subquery (``alwaysQuerySource``).
        limit: Most subqueries to keep.

    Returns:
        The subqueries to search, each with a non-empty ``sources`` unless nothing is allowed.
    """
    seen: set[str] = set()
    resolved: list[Subquery] = []
    for subquery in planned:
        key = same_words_key(subquery.text)
        if not key or key in seen:
            continue
        seen.add(key)
        chosen = [n for n in allowed if n in subquery.sources] or list(allowed)
        chosen += [n for n in always if n not in chosen]
        resolved.append(subquery.model_copy(update={"sources": tuple(chosen)}))
        if len(resolved) == limit:
            break
    return resolved


def next_round(subqueries: Sequence[Subquery]) -> int:
    """The number of the next retrieval round: 0 first, then one past the last searched."""
    return max((s.round for s in subqueries), default=-1) + 1


def build_tasks(
    subqueries: list[Subquery],
    params: SourceParams,
    context: Context,
    started_at: float,
) -> list[SearchTask]:
    """One task per (subquery, source), with the caller's filter ANDed with the planner's.

    The caller's ``filterAddOn`` is a security boundary: it is always kept, and the
    planner's filter can only narrow it.
    """
    deadline = started_at + context.max_runtime_seconds
    tasks = []
    for subquery in subqueries:
        for source in subquery.sources:
            caller = params[source].filter_add_on if source in params else None
            tasks.append(
                SearchTask(
                    subquery=subquery,
                    source=source,
                    filter=and_filters(caller, subquery.filter),
                    top=context.search_top,
                    deadline=deadline,
                    timeout=context.source_timeout_seconds,
                    fail_on_error=bool(source in params and params[source].fail_on_error),
                    topic_graph=params[source].topic_graph if source in params else None,
                )
            )
    return tasks


def build_graph_tasks(
    subqueries: list[Subquery],
    params: SourceParams,
    sources: Mapping[str, KnowledgeSource],
    context: Context,
    started_at: float,
    use_model: bool,
) -> list[GraphSearchTask]:
    """One graph search per (subquery, source) whose params carry ``graphParameters``.

    Only sources with an entity graph (:class:`GraphKnowledgeSource`) are searched this way;
    the parameters on any other source are accepted and ignored, as a search index without a
    graph profile would.
    """
    with_graph = {n for n, s in sources.items() if isinstance(s, GraphKnowledgeSource)}
    deadline = started_at + context.max_runtime_seconds
    tasks = []
    for subquery in subqueries:
        for source in subquery.sources:
            graph = params[source].graph_parameters if source in params else None
            if graph is not None and source in with_graph:
                tasks.append(
                    GraphSearchTask(
                        subquery=subquery,
                        source=source,
                        parameters=graph,
                        deadline=deadline,
                        timeout=context.source_timeout_seconds,
                        use_model=use_model,
                    )
                )
    return tasks


def with_instructions(prompt: str, section: str, instructions: str | None) -> str:
    """``prompt`` with the knowledge base's ``instructions`` appended in ``section``.

    Appended, not a placeholder: a custom prompt still gets them, and braces in the
    instructions are data, never format fields. Blank instructions leave the prompt as is.
    """
    text = (instructions or "").strip()
    return prompt + section.replace("{instructions}", text) if text else prompt


def searched_update(
    runtime: Runtime[Any],
    record: AnyActivity,
    hits: Sequence[Hit],
    *,
    source: str,
    subquery_id: str,
    query: str,
    error: ErrorInfo | None,
    graph_index: str | None = None,
) -> Update:
    """What a search step (a search, or a graph search) reports and adds to the state.

    Completes ``record``, emits the ``Searched`` note, and returns the hits tagged with the
    subquery, query and record that found them (``graph_index`` for a graph search's), with
    ``partial`` set when the step failed.
    """
    complete(runtime, record)
    emit(
        runtime,
        Searched(
            source=source,
            query=query,
            count=len(hits),
            elapsed_ms=record.elapsed_ms,
            error=error.message if error else None,
        ),
    )
    retrieved = [
        RetrievedHit(
            **hit.model_dump(exclude={"source"}),
            source=source,
            subquery_id=subquery_id,
            query=query,
            activity_key=record.key,
            graph_index=graph_index,
        )
        for hit in hits
    ]
    update: Update = {"hits": retrieved, "activity_log": [record]}
    if error:
        update["partial"] = True
    return update
