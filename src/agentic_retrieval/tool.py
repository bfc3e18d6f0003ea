"""A knowledge base as a LangChain tool an agent calls (:meth:`KnowledgeBase.as_tool`).

The model fills ``query`` and, where the knowledge base supports them, ``filter`` (an OData
filter, ANDed with any filter bound when the tool was made) and ``sources`` (a subset of the
sources the tool may search). Everything else is fixed when the tool is made: effort, output
mode, run settings and, above all, the caller's identity, which is never an argument, so a
model (or a prompt injected into one) can only narrow a search, never widen it.

The tool answers with ``response_format="content_and_artifact"``: the content is what the
model reads (the grounding passages with their ``ref_id`` s, or the cited answer), the
artifact the whole :class:`~agentic_retrieval.wire.models.RetrieveResponse` (references,
activity, status). Errors the model can act on (a bad filter, a source that failed with
``failOnError``, a timeout) come back as error tool messages (``ToolException`` with
``handle_tool_error``), never as exceptions that end the agent's run.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, Protocol, runtime_checkable

from langchain_core.callbacks import (
    AsyncCallbackManagerForToolRun,
    CallbackManagerForToolRun,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.v1 import ValidationError as ValidationErrorV1

from agentic_retrieval.context import Context
from agentic_retrieval.errors import (
    AgenticRetrievalError,
    IdentityRequiredError,
    InvalidRequestError,
    UnknownKnowledgeSourceError,
)
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.sync import run_sync
from agentic_retrieval.graph.vocabulary import (
    OUTPUT_MODES,
    REQUESTED_EFFORTS,
    OutputMode,
    RequestedEffort,
)
from agentic_retrieval.odata import ODataError, check_fields, parse_filter
from agentic_retrieval.odata.compose import and_filters
from agentic_retrieval.odata.fields import describe_schema
from agentic_retrieval.permissions import Identity
from agentic_retrieval.retriever import Retrieves
from agentic_retrieval.sources.base import (
    FilterableKnowledgeSource,
    KnowledgeSource,
    TypedFilterableKnowledgeSource,
)
from agentic_retrieval.wire.models import RetrieveResponse
from agentic_retrieval.wire.retrieve import conversation_request, known_fields, prepare
from agentic_retrieval.wire.summary import failed_sources

MAX_QUERY_CHARS = 10_000
MAX_FILTER_CHARS = 4_000
MAX_DESCRIPTION_CHARS = 1_024
"""OpenAI's limit on a function's description; other providers' are larger."""
ARGUMENTS = ("filter", "sources")
"""The optional arguments a tool may offer the model, beside ``query``."""


def describe_invalid_arguments(error: ValidationError | ValidationErrorV1) -> str:
    """One line per invalid argument, naming it (what the model reads to fix its call)."""
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "arguments"
        parts.append(f"{where}: {item['msg']}")
    return "Invalid arguments: " + "; ".join(parts)


@runtime_checkable
class ToolTarget(Retrieves, Protocol):
    """What the tool needs from a knowledge base (:class:`~agentic_retrieval.KnowledgeBase`)."""

    name: str
    description: str
    require_identity: bool
    bindings: Bindings


class KnowledgeBaseTool(BaseTool):
    """Retrieve from a knowledge base, as a tool a model calls.

    Make one with :meth:`KnowledgeBase.as_tool` (which checks the settings before the first
    call); the arguments the model sees are in ``args_schema``.

    Attributes:
        knowledge_base: The knowledge base searched.
        effort: The retrieval reasoning effort (``None``: the knowledge base's default).
        output_mode: ``extractiveData`` or ``answerSynthesis`` (``None``: the default).
        identity: Who the searches are for; sources trim to what it may see.
        run_defaults: The run settings (the knowledge base's, with the tool's overrides).
        bound_filter: An OData filter applied to every call, ANDed with the model's.
        sources_allowed: The sources this tool may search (``sources`` picks among them).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    knowledge_base: ToolTarget
    effort: RequestedEffort | None = None
    output_mode: OutputMode | None = None
    identity: Identity | None = None
    run_defaults: Context
    bound_filter: str | None = None
    sources_allowed: list[str]
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"
    handle_tool_error: bool | str | Callable[[ToolException], Any] | None = True
    handle_validation_error: (
        bool | str | Callable[[ValidationError | ValidationErrorV1], str] | None
    ) = describe_invalid_arguments

    def _run(
        self,
        query: str,
        filter: str | None = None,
        sources: list[str] | None = None,
        *,
        run_manager: CallbackManagerForToolRun | None = None,
    ) -> tuple[str, RetrieveResponse]:
        callbacks = run_manager.get_child() if run_manager is not None else None
        return run_sync(self._retrieve(query, filter, sources, callbacks))

    async def _arun(
        self,
        query: str,
        filter: str | None = None,
        sources: list[str] | None = None,
        *,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
    ) -> tuple[str, RetrieveResponse]:
        callbacks = run_manager.get_child() if run_manager is not None else None
        return await self._retrieve(query, filter, sources, callbacks)

    def request(
        self, query: str, filter: str | None = None, sources: list[str] | None = None
    ) -> dict[str, Any]:
        """The retrieve request (wire JSON) one call makes.

        Raises:
            ToolException: A blank query, a filter that does not parse or names no field
                of the sources, or a source the tool may not search.
        """
        if not query.strip():
            raise ToolException("query is empty: give the question to search for")
        chosen = self._sources(sources)
        if filter and filter.strip():
            self._check_filter(filter, chosen)
        excluded = [n for n in self.sources_allowed if n not in chosen]
        request = conversation_request(
            [("user", query)],
            self.knowledge_base.sources,
            effort=self.effort,
            output_mode=self.output_mode,
            filter_add_on=and_filters(self.bound_filter, filter),
            exclude=excluded,
        )
        return request

    async def _retrieve(
        self, query: str, filter: str | None, sources: list[str] | None, callbacks: Any
    ) -> tuple[str, RetrieveResponse]:
        request = self.request(query, filter, sources)
        try:
            response = await self.knowledge_base.aretrieve(
                request,
                identity=self.identity,
                config=RunnableConfig(callbacks=callbacks),
                defaults=self.run_defaults,
            )
        except AgenticRetrievalError as exc:  # the caller's or a source's problem: say it
            raise ToolException(str(exc)) from exc
        if response.status_code == 408:
            raise ToolException(
                f"the search timed out after {self.run_defaults.max_runtime_seconds:g} s "
                "before any result was ready; try again, or ask a narrower question"
            )
        return tool_content(response, self.knowledge_base.name), response

    def _sources(self, sources: list[str] | None) -> list[str]:
        if not sources:
            return list(self.sources_allowed)
        unknown = [n for n in sources if n not in self.sources_allowed]
        if unknown:
            raise ToolException(
                f"sources: unknown source(s) {', '.join(unknown)}; choose from "
                f"{', '.join(self.sources_allowed)}"
            )
        return [n for n in self.sources_allowed if n in sources]

    def _check_filter(self, text: str, names: list[str]) -> None:
        """The checks the request's ``filterAddOn`` gets, reported in the tool's terms."""
        sources = self.knowledge_base.sources
        try:
            expr = parse_filter(text)
            if any(isinstance(sources[n], TypedFilterableKnowledgeSource) for n in names):
                check_fields(expr, known_fields(sources))
        except ODataError as exc:
            raise ToolException(f"filter: {exc}") from exc


def knowledge_base_tool(
    kb: ToolTarget,
    name: str | None = None,
    description: str | None = None,
    *,
    effort: RequestedEffort | None = None,
    output_mode: OutputMode | None = None,
    identity: Identity | None = None,
    filter: str | None = None,
    arguments: Collection[str] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> KnowledgeBaseTool:
    """Make the tool for ``kb`` (see :meth:`KnowledgeBase.as_tool`), checking its settings.

    Raises:
        IdentityRequiredError: ``kb`` requires an identity and none is given.
        InvalidRequestError: An effort or output mode that is not one of its values, or a
            setting the knowledge base cannot run with (an effort or output mode without a
            chat model, a bound filter that does not parse, no source left to search).
        UnknownKnowledgeSourceError: ``knowledge_sources`` names a source ``kb`` does not
            have.
        TypeError: A default that is not a :class:`Context` field, or an unknown argument.
    """
    if kb.require_identity and identity is None:
        raise IdentityRequiredError(
            f"the knowledge base '{kb.name}' requires a caller identity: pass identity= to "
            "as_tool (it is bound to the tool, never an argument the model fills)"
        )
    _check_choice("effort", effort, REQUESTED_EFFORTS)
    _check_choice("output_mode", output_mode, OUTPUT_MODES)
    run_defaults = _run_defaults(kb.defaults, defaults or {})
    allowed = _allowed_sources(kb, run_defaults)
    offered = _offered_arguments(kb, allowed, arguments)
    tool = KnowledgeBaseTool(
        name=name or tool_name(kb.name),
        description=description or tool_description(kb, allowed, output_mode),
        args_schema=arguments_schema(kb, allowed, offered),
        knowledge_base=kb,
        effort=effort,
        output_mode=output_mode,
        identity=identity,
        run_defaults=run_defaults,
        bound_filter=filter,
        sources_allowed=allowed,
    )
    try:  # what every call would reject, rejected now, where the developer sees it
        if filter and filter.strip():  # in the tool's terms, not the request's filterAddOn
            tool._check_filter(filter, allowed)
        prepare(tool.request("settings check"), run_defaults, kb.bindings)
    except (InvalidRequestError, ToolException) as exc:
        settings = f"effort={effort!r}, output_mode={output_mode!r}, filter={filter!r}"
        raise InvalidRequestError(f"as_tool({settings}): {exc}") from exc
    return tool


def tool_name(knowledge_base: str) -> str:
    """``search_<name>``, in the characters and length tool-calling APIs accept."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "_", knowledge_base).strip("_") or "knowledge_base"
    return f"search_{cleaned}"[:64]


def tool_description(
    kb: ToolTarget, allowed: list[str], output_mode: OutputMode | None = None
) -> str:
    """What the model reads to decide when to call the tool (at most 1,024 characters)."""
    about = kb.description.strip()
    if about and not about.endswith((".", "!", "?")):
        about += "."
    if (output_mode or kb.defaults.output_mode) == "answerSynthesis":
        returns = "Returns an answer citing its sources as [ref_id:N]."
    else:
        returns = "Returns the best matching passages, each with a ref_id: cite them as [ref_id:N]."
    sources = "; ".join(
        f"{n}: {kb.sources[n].description}" if kb.sources[n].description else n for n in allowed
    )
    text = " ".join(
        part
        for part in (
            f"Search the knowledge base '{kb.name}'.",
            about,
            returns,
            f"Sources: {sources}.",
        )
        if part
    )
    if len(text) > MAX_DESCRIPTION_CHARS:
        text = text[: MAX_DESCRIPTION_CHARS - 1].rstrip() + "…"
    return text


def arguments_schema(kb: ToolTarget, allowed: list[str], offered: set[str]) -> type[BaseModel]:
    """The tool's arguments: ``query``, plus ``filter`` and ``sources`` where offered."""
    fields: dict[str, Any] = {
        "query": (
            str,
            Field(
                min_length=1,
                max_length=MAX_QUERY_CHARS,
                description="What to search for: a self-contained question or request in "
                "natural language (the search does not see the conversation).",
            ),
        )
    }
    if "filter" in offered:
        fields["filter"] = (
            str | None,
            Field(
                default=None,
                max_length=MAX_FILTER_CHARS,
                description="Optional OData filter to narrow the search, e.g. "
                f"year ge 2024 and category eq 'news'. {_fields_hint(kb, allowed)}",
            ),
        )
    if "sources" in offered:
        choices = tuple(allowed)
        fields["sources"] = (
            list[Literal[choices]] | None,  # type: ignore[valid-type]
            Field(
                default=None,
                min_length=1,
                max_length=len(allowed),
                description="Optional: search only these sources (default: all of them).",
            ),
        )
    schema: type[BaseModel] = create_model(
        "KnowledgeBaseSearch", __config__=ConfigDict(extra="forbid"), **fields
    )
    schema.__doc__ = f"Search the knowledge base '{kb.name}'."
    return schema


def tool_content(response: RetrieveResponse, knowledge_base: str) -> str:
    """What the model reads: the passages (or the answer), with a note for a 206.

    A partial response (a source failed) says which source failed and why, so the model can
    tell the user, or retry with ``sources`` left out.
    """
    text = response.text
    if text.strip() in ("", "[]"):
        text = f"Nothing in the knowledge base '{knowledge_base}' matched this search."
        judged = _judged_irrelevant(response)
        if judged:
            text = (
                f"Nothing relevant in the knowledge base '{knowledge_base}': the search found "
                f"{judged} passages, but none is relevant enough to this question (all scored "
                "under the rerankerThreshold), so the knowledge base most likely does not "
                "answer it. Do not answer from these sources; say so, or search again in "
                "other words."
            )
    notes = [
        f"the source '{name}' failed ({message}), so these results come from the others only"
        for name, message in failed_sources(response)
    ]
    if notes:
        text = "Note: " + "; ".join(notes) + ".\n\n" + text
    return text


def _judged_irrelevant(response: RetrieveResponse) -> int:
    """How many candidates the last reranking scored and all dropped (0: it kept some)."""
    reranks = [r.model_extra or {} for r in response.activity or [] if r.type == "semanticReranker"]
    last = reranks[-1] if reranks else {}
    if last.get("keptCount", 0) or not last.get("candidateCount", 0):
        return 0
    return int(last["candidateCount"])


def _run_defaults(defaults: Context, overrides: Mapping[str, Any]) -> Context:
    known = {f.name for f in dataclasses.fields(Context)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(
            f"as_tool: unknown setting(s) {', '.join(unknown)}; settings are Context fields "
            "(top_n, max_output_size, knowledge_sources, reranker_threshold...)"
        )
    if "identity" in overrides:
        raise TypeError("as_tool: pass the caller's identity as identity=, not as a setting")
    try:
        return dataclasses.replace(defaults, **overrides)
    except ValueError as exc:
        raise InvalidRequestError(f"as_tool: {exc}") from exc


def _check_choice(setting: str, value: object, choices: tuple[str, ...]) -> None:
    """One line naming the setting and its values, not pydantic's report on the tool model."""
    if value is not None and value not in choices:
        raise InvalidRequestError(
            f"as_tool: {setting}={value!r} is not one of {', '.join(choices)}"
        )


def _allowed_sources(kb: ToolTarget, defaults: Context) -> list[str]:
    names = list(kb.sources)
    if defaults.knowledge_sources is not None:
        unknown = [n for n in defaults.knowledge_sources if n not in kb.sources]
        if unknown:  # a misspelt name would otherwise narrow the tool silently
            raise UnknownKnowledgeSourceError(
                f"as_tool: knowledge_sources names {', '.join(repr(n) for n in unknown)}, "
                f"which the knowledge base '{kb.name}' does not have (it has: "
                f"{', '.join(names) or 'none'})"
            )
        names = [n for n in names if n in defaults.knowledge_sources]
    return names


def _offered_arguments(
    kb: ToolTarget, allowed: list[str], arguments: Collection[str] | None
) -> set[str]:
    """The optional arguments: those asked for, else those the knowledge base supports.

    ``sources`` needs more than one source to choose from; ``filter`` a source that names
    its filterable fields (the model cannot write a filter on fields it does not know).
    """
    if arguments is not None:
        unknown = sorted(set(arguments) - set(ARGUMENTS))
        if unknown:
            raise TypeError(
                f"as_tool: unknown argument(s) {', '.join(unknown)}; choose from "
                f"{', '.join(ARGUMENTS)}"
            )
        return set(arguments)
    offered = set()
    if len(allowed) > 1:
        offered.add("sources")
    if any(_filterable_fields(kb.sources[n]) for n in allowed):
        offered.add("filter")
    return offered


def _filterable_fields(source: KnowledgeSource) -> list[str]:
    if isinstance(source, TypedFilterableKnowledgeSource):
        return sorted(source.filter_schema())
    if isinstance(source, FilterableKnowledgeSource):
        return list(source.filterable_fields)
    return []


def _fields_hint(kb: ToolTarget, allowed: list[str]) -> str:
    parts = []
    for name in allowed:
        source = kb.sources[name]
        if isinstance(source, TypedFilterableKnowledgeSource):
            parts.append(f"{name}: {describe_schema(source.filter_schema())}")
        elif fields := _filterable_fields(source):
            parts.append(f"{name}: {', '.join(fields)}")
    return f"Filterable fields by source: {'; '.join(parts)}." if parts else ""
