"""The retrieve API at the edge: from a wire request to a graph run, and back.

The Python API (:class:`~agentic_retrieval.KnowledgeBase`), the REST server, the MCP tool and
the command line all go through these functions, so a request means the same everywhere:

- :func:`prepare`: validate a request (:func:`parse_request`), derive the run's
  :class:`~agentic_retrieval.context.Context` (:func:`run_context`) and reject what would fail
  later (:func:`check_request`);
- :func:`conversation_request`: the wire request the CLI and the MCP tool build from turns;
- :func:`graph_input`: the graph input for a request;
- :func:`to_response` / :func:`timed_out_response`: the wire response for a graph output.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from pydantic import ValidationError

from agentic_retrieval.context import Context
from agentic_retrieval.errors import (
    InvalidRequestError,
    KnowledgeSourceFailedError,
    ModelNotConfiguredError,
    ModelRequiredError,
    ModelUnavailableError,
    UnknownKnowledgeSourceError,
)
from agentic_retrieval.graph.bindings import Bindings, allowed_sources
from agentic_retrieval.graph.effort import EffortChoice, choose_effort, planner_for
from agentic_retrieval.graph.vocabulary import ModelRole
from agentic_retrieval.llm.chat_models import MODEL_ENV_VAR
from agentic_retrieval.odata import (
    FieldSchema,
    ODataError,
    check_fields,
    merge_schemas,
    parse_filter,
)
from agentic_retrieval.sources.base import (
    FilterCheckingKnowledgeSource,
    KnowledgeSource,
    TypedFilterableKnowledgeSource,
)
from agentic_retrieval.state import InputState
from agentic_retrieval.wire.models import (
    ActivityRecord,
    MessageContent,
    Reference,
    ResponseMessage,
    RetrieveRequest,
    RetrieveResponse,
    check_source_params,
    describe_validation_error,
)


def prepare(
    request: RetrieveRequest | Mapping[str, Any], defaults: Context, bindings: Bindings
) -> tuple[RetrieveRequest, Context]:
    """Validate ``request`` and derive its run's Context, rejecting what would fail later.

    Args:
        request: A :class:`RetrieveRequest` or its JSON shape.
        defaults: Settings where the request is silent (a knowledge base's defaults).
        bindings: The sources and chat models the run would use.

    Raises:
        InvalidRequestError: Bad input; the message names the field.
        UnknownKnowledgeSourceError: The request names a source that is not bound.
    """
    parsed = parse_request(request)
    context = run_context(parsed, defaults)
    check_request(parsed, context, bindings)
    return parsed, context


def parse_request(request: RetrieveRequest | Mapping[str, Any]) -> RetrieveRequest:
    """Validate ``request`` (a model or a JSON-shaped dict).

    Raises:
        InvalidRequestError: With a message naming the offending field.
    """
    if isinstance(request, RetrieveRequest):
        return request
    try:
        return RetrieveRequest.model_validate(request)
    except ValidationError as exc:
        raise InvalidRequestError(describe_validation_error(exc)) from exc


def run_context(request: RetrieveRequest, defaults: Context) -> Context:
    """The run's Context: ``defaults`` overridden by what the request sets.

    Raises:
        InvalidRequestError: An override is out of its Context bounds.
    """
    overrides: dict[str, Any] = {}
    if request.effort:
        overrides["reasoning_effort"] = request.effort
    if request.output_mode:
        overrides["output_mode"] = request.output_mode
    if request.max_runtime_in_seconds:
        overrides["max_runtime_seconds"] = float(request.max_runtime_in_seconds)
    if request.max_output_size:
        overrides["max_output_size"] = request.max_output_size
    if request.max_output_size_in_tokens:
        overrides["max_output_tokens"] = request.max_output_size_in_tokens
    if request.max_output_documents:
        overrides["max_output_documents"] = request.max_output_documents
    limits = [
        p.max_docs_for_reranker
        for p in request.knowledge_source_params or []
        if p.max_docs_for_reranker
    ]
    if limits:
        overrides["max_docs_for_reranker"] = max(limits)
    try:
        return dataclasses.replace(defaults, **overrides)
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from exc


def check_request(request: RetrieveRequest, context: Context, bindings: Bindings) -> None:
    """Reject what would fail later: unknown sources, bad filters, no model.

    Raises:
        UnknownKnowledgeSourceError: A named source does not exist.
        InvalidRequestError: A ``filterAddOn`` does not parse or does not fit its source's
            fields, or a configured chat model cannot be created.
        ModelRequiredError: The effort or output mode the caller chose needs a chat model
            and none is configured (an unset effort never does: it runs model-free).
    """
    sources = bindings.sources
    for params in request.knowledge_source_params or []:
        if params.knowledge_source_name not in sources:
            raise UnknownKnowledgeSourceError(
                f"knowledgeSourceParams: unknown knowledge source "
                f"'{params.knowledge_source_name}' (this knowledge base has: "
                f"{', '.join(sources) or 'none'})"
            )
        unreranked = params.knowledge_source_name in (context.unreranked_sources or [])
        try:
            check_source_params(params, "none" if unreranked else "rerank")
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from exc
        if params.filter_add_on:
            source = sources[params.knowledge_source_name]
            try:
                expr = parse_filter(params.filter_add_on)
                if isinstance(source, FilterCheckingKnowledgeSource):
                    source.check_filter(expr)  # e.g. its permission fields
                if isinstance(source, TypedFilterableKnowledgeSource):
                    check_fields(expr, known_fields(sources))
            except ODataError as exc:
                raise InvalidRequestError(
                    f"knowledgeSourceParams[{params.knowledge_source_name}].filterAddOn: {exc}"
                ) from exc
    excluded = [
        p.knowledge_source_name
        for p in request.knowledge_source_params or []
        if p.never_query_source
    ]
    by_name = {p.knowledge_source_name: p for p in request.knowledge_source_params or []}
    # the sources this run may query (Context.knowledge_sources restricts the bound ones):
    # none left would be a 200 that searched nothing
    if sources and not allowed_sources(bindings, context, by_name):
        if excluded:
            raise InvalidRequestError(
                "knowledgeSourceParams: neverQuerySource excludes every knowledge source this "
                f"request may query ({', '.join(excluded)}); leave at least one to query"
            )
        permitted = [n for n in sources if n in (context.knowledge_sources or [])]
        named = [p.knowledge_source_name for p in request.knowledge_source_params or []]
        asked = f"the request names {', '.join(named)}, but " if named else ""
        may = (
            f"only {', '.join(permitted)}" if permitted else "none of this knowledge base's sources"
        )
        raise InvalidRequestError(
            f"knowledgeSourceParams: no knowledge source left to query: {asked}this run may "
            f"query {may} (Context.knowledge_sources)"
        )
    for setting, value, role in _model_needs(request, context, bindings):
        try:
            bindings.models.resolve(role, context)  # builds it: surfaces bad config
        except ModelNotConfiguredError as exc:
            from_request = request.effort if setting == "effort" else request.output_mode
            raise ModelRequiredError(
                setting, value, role, MODEL_ENV_VAR, from_request=from_request is not None
            ) from exc
        except ModelUnavailableError as exc:
            raise InvalidRequestError(str(exc)) from exc


def known_fields(sources: Mapping[str, KnowledgeSource]) -> FieldSchema:
    """The fields filters may name: those of every source that knows its fields, merged.

    A filter may name a field only some sources have (the others hold no such value and
    match nothing), so a field is unknown only when no source of the knowledge base has it.
    """
    return merge_schemas(
        *(
            s.filter_schema()
            for s in sources.values()
            if isinstance(s, TypedFilterableKnowledgeSource)
        )
    )


def _model_needs(
    request: RetrieveRequest, context: Context, bindings: Bindings
) -> list[tuple[str, str, ModelRole]]:
    """What in a run of ``request`` calls a chat model: ``(setting, value, role)`` triples.

    The effort is decided as the graph decides it (:func:`choose_effort`): left unset it
    never needs a model, so only an effort the caller chose, or ``answerSynthesis``, can;
    ``auto`` with a planning model may escalate to assessment, so it needs both models.
    """
    has_intents = bool(request.intents)
    choice = effort_choice(request, context, bindings)
    needs: list[tuple[str, str, ModelRole]] = []
    if planner_for(has_intents, choice.effort) == "model":
        needs.append(("effort", choice.effort, "planning"))
        if choice.effort == "medium":
            needs.append(("effort", choice.effort, "evidence"))
    elif choice.auto:  # may escalate up to assessment: build both models now
        needs += [("effort", "auto", "planning"), ("effort", "auto", "evidence")]
    if context.output_mode == "answerSynthesis":
        needs.append(("output_mode", context.output_mode, "answer"))
    return needs


def conversation_request(
    turns: Sequence[tuple[str, str]],
    sources: Mapping[str, KnowledgeSource],
    *,
    effort: str | None = None,
    output_mode: str | None = None,
    filter_add_on: str | None = None,
    source_data: bool = False,
    max_output_documents: int | None = None,
    exclude: Sequence[str] = (),
) -> dict[str, Any]:
    """The wire request for a conversation, as the CLI and the MCP tool build it.

    Args:
        turns: ``(role, text)`` pairs, oldest first.
        sources: The knowledge base's sources (the per-source parameters name each).
        effort: ``minimal``, ``low``, ``medium`` or ``auto`` (default: the knowledge base's).
        output_mode: ``extractiveData`` or ``answerSynthesis``.
        filter_add_on: An OData filter ANDed onto every source.
        source_data: Ask every source for ``sourceData`` on its references.
        max_output_documents: Most documents in the response (``maxOutputDocuments``).
        exclude: Sources to leave out (``neverQuerySource``); a name the knowledge base
            does not have is kept, so the request is rejected naming it.
    """
    request: dict[str, Any] = {
        "messages": [
            {"role": role, "content": [{"type": "text", "text": text}]} for role, text in turns
        ]
    }
    if effort:
        request["retrievalReasoningEffort"] = {"kind": effort}
    if output_mode:
        request["outputMode"] = output_mode
    if max_output_documents is not None:
        request["maxOutputDocuments"] = max_output_documents
    if filter_add_on or source_data or exclude:
        kinds = {name: source.kind for name, source in sources.items()}
        names = list(sources) + [n for n in exclude if n not in sources]
        request["knowledgeSourceParams"] = [
            {
                "knowledgeSourceName": name,
                "kind": kinds.get(name, "searchIndex"),
                **({"filterAddOn": filter_add_on} if filter_add_on else {}),
                **({"includeReferenceSourceData": True} if source_data else {}),
                **({"neverQuerySource": True} if name in exclude else {}),
            }
            for name in names
        ]
    return request


def effort_choice(request: RetrieveRequest, context: Context, bindings: Bindings) -> EffortChoice:
    """The effort a run of ``request`` starts at, decided as the graph decides it."""
    return choose_effort(
        context.reasoning_effort,
        has_intents=bool(request.intents),
        can_plan=bindings.models.is_configured("planning", context),
    )


def graph_input(request: RetrieveRequest) -> InputState:
    """The graph input for ``request``."""
    return InputState(
        messages=[_to_message(m.role, m.text) for m in request.messages or [] if m.text],
        intents=[i.search for i in request.intents or []],
        # validated once, with the request: begin_turn takes the models as they are
        knowledge_source_params=list(request.knowledge_source_params or []),
    )


def to_response(output: Mapping[str, Any], request: RetrieveRequest) -> RetrieveResponse:
    """The wire response for a graph output (the graph's output keys).

    Raises:
        KnowledgeSourceFailedError: A source whose ``failOnError`` is set failed.
    """
    failure = output.get("failure")
    if failure:
        raise KnowledgeSourceFailedError(failure["source"], failure["code"], failure["message"])
    response = RetrieveResponse(
        response=[
            ResponseMessage(content=[MessageContent(type="text", text=output.get("response", ""))])
        ],
        activity=(
            None
            if request.include_activity is False
            else [ActivityRecord.model_validate(r) for r in output.get("activity") or []]
        ),
        references=[Reference.model_validate(r) for r in output.get("references") or []],
    )
    response._partial = bool(output.get("partial"))
    response._timed_out = bool(output.get("timed_out"))
    response._has_results = bool(output.get("passage_count")) or bool(response.references)
    return response


def effort_warnings(response: RetrieveResponse) -> list[str]:
    """What a run said about its effort (its ``agenticReasoning`` record's ``warning``).

    For example: no chat model is configured, so the model-free tier ran.
    """
    return [
        str((record.model_extra or {}).get("warning"))
        for record in response.activity or []
        if record.type == "agenticReasoning" and (record.model_extra or {}).get("warning")
    ]


def timed_out_response(context: Context, started: float) -> RetrieveResponse:
    """The response of a run abandoned at ``maxRuntimeInSeconds`` with nothing ready (408)."""
    record = ActivityRecord.model_validate(
        {
            "type": "runtimeLimit",
            "id": 0,
            "elapsedMs": int((time.time() - started) * 1000),
            "error": {
                "code": "Timeout",
                "message": f"maxRuntimeInSeconds ({context.max_runtime_seconds:g} s) elapsed "
                "before any result was ready",
            },
        }
    )
    response = RetrieveResponse(
        response=[ResponseMessage(content=[MessageContent(type="text", text="[]")])],
        activity=[record],
        references=[],
    )
    response._timed_out = True
    return response


def _to_message(role: str | None, text: str) -> AIMessage | HumanMessage | SystemMessage:
    if role == "assistant":
        return AIMessage(content=text)
    if role == "system":
        return SystemMessage(content=text)
    return HumanMessage(content=text)
