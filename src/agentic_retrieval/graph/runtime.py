"""What a node gets besides its input, and the one adapter that hands it over.

Every node is an ``async def node(state, run: Run) -> Update``: ``run.context`` is the run's
:class:`~agentic_retrieval.context.Context` (resolved once, whether the caller passed a
``Context``, a dict from Studio or only ``config["configurable"]``), ``run.bindings`` the
sources, chat models and reranker the graph was built over, ``run.config`` what model calls
forward (callbacks, tracing), and ``run.emit`` / ``run.begin`` / ``run.complete`` write the
typed events of :mod:`agentic_retrieval.graph.events` to the custom stream.

:class:`BoundNode` is what the builder registers: a LangChain ``Runnable`` (public API only)
running the node on ``ainvoke`` and, for ``invoke`` / ``stream``, on the library's background
event loop (:func:`~agentic_retrieval.graph.sync.run_sync`), so the same graph serves sync
and async callers, Jupyter included.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, get_args, get_origin, get_type_hints

from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langgraph.config import get_config
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import Command, StreamWriter

from agentic_retrieval.context import DEFAULTS_KEY, Context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.events import (
    AnyProgress,
    StepCompleted,
    StepStarted,
    step_clock,
)
from agentic_retrieval.graph.records import Activity, AnyActivity
from agentic_retrieval.graph.sync import run_sync
from agentic_retrieval.sources.base import KnowledgeSource
from agentic_retrieval.state import Update

InputT = TypeVar("InputT")


@dataclass(frozen=True)
class Run:
    """One node's view of the run: its settings, the bound live objects, the stream."""

    context: Context
    bindings: Bindings
    config: RunnableConfig
    writer: StreamWriter

    def emit(self, note: AnyProgress) -> None:
        """Write a progress note to the custom stream."""
        self.writer(note.to_stream())

    def begin(
        self, key: str, record: type[Activity], *, source: KnowledgeSource | None = None
    ) -> StepStarted:
        """Announce a step whose record will be of class ``record``, and start its clock.

        Args:
            key: The record's key.
            record: The record's class (its wire ``type`` is announced).
            source: The knowledge source a search step queries.
        """
        step = StepStarted(
            key=key,
            type=record.announced_type(source.kind if source is not None else None),
            started=step_clock(),
            source=source.name if source is not None else None,
        )
        self.writer(step.to_stream())
        return step

    def complete(self, record: AnyActivity) -> None:
        """Report a finished step with its record."""
        self.writer(StepCompleted(record).to_stream())


Output = Update | Command[Any]
"""What a node returns: a state update, or a ``Command`` (an update and where the run goes)."""

NodeBody = Callable[[InputT, Run], Awaitable[Output]]
"""A node: its input (the state, or a ``Send`` payload) and the run, to a state update (or,
for a node with several ways out, a ``Command`` naming where the run goes)."""


def destinations(body: NodeBody[Any]) -> tuple[str, ...]:
    """Where a node may send the run: its ``Command[Literal[...]]`` return annotation.

    What LangGraph reads from a plain function node; read here because the builder registers
    :class:`BoundNode`, whose own signature says nothing of the body's.
    """
    returned = get_type_hints(body).get("return")
    if get_origin(returned) is not Command:
        return ()
    (ways,) = get_args(returned)  # a Literal (nested ones are flattened)
    return get_args(ways) if get_origin(ways) is Literal else ()


class BoundNode(Runnable[InputT, Output], Generic[InputT]):
    """A node body bound to the graph's live objects: what the builder registers.

    Args:
        body: The node.
        bindings: The sources, chat models and reranker every run of the graph uses.
    """

    def __init__(self, body: NodeBody[InputT], bindings: Bindings) -> None:
        self.body = body
        self.bindings = bindings
        self.name = body.__name__

    async def ainvoke(
        self, input: InputT, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Output:
        """Run the node (LangGraph calls this inside the run's config context)."""
        runtime = get_runtime(Context)
        run = Run(
            resolve_context(runtime), self.bindings, ensure_config(config), runtime.stream_writer
        )
        return await self.body(input, run)

    def invoke(self, input: InputT, config: RunnableConfig | None = None, **kwargs: Any) -> Output:
        """Run the node from sync code, on the background loop (see the module docstring)."""
        return run_sync(self.ainvoke(input, config, **kwargs))


def resolve_context(runtime: Runtime[Context] | None) -> Context:
    """The run's Context: ``context=`` when given, else ``config["configurable"]``.

    Both ways of configuring a LangGraph run work: ``graph.invoke(x, context=Context(...))``
    and ``graph.invoke(x, {"configurable": {"reasoning_effort": "minimal"}})`` (what older
    clients and some Studio set-ups send). A context given as a dict (Studio's configuration
    panel) or as ``configurable`` fills in over the graph's own defaults
    (``configurable[DEFAULTS_KEY]``), so a knowledge base's settings apply where it is silent.
    """
    context = runtime.context if runtime is not None else None
    if isinstance(context, Context):
        return context
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # called outside a run
        configurable = {}
    # a context names only fields; configurable also carries LangGraph's own keys
    strict = isinstance(context, Mapping)
    given = dict(context) if isinstance(context, Mapping) else dict(configurable)
    return Context.from_mapping({**(configurable.get(DEFAULTS_KEY) or {}), **given}, strict=strict)
