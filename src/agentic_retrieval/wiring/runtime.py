"""How the builder registers a node: the one adapter between LangGraph and the node bodies.

A node is a LangGraph node: ``async def node(state, runtime: Runtime[Context]) -> Update``
(or ``-> Command[Literal[...]]`` when it has several ways out). ``runtime.context`` is the
run's :class:`~agentic_retrieval.context.Context`; progress and activity steps go to
``runtime.stream_writer`` through :mod:`agentic_retrieval.graph.events`. Two more
parameters, by name as LangGraph's own ``config`` is: ``bindings``, the sources, chat models
and reranker the graph was built over (:class:`~agentic_retrieval.graph.bindings.Bindings`,
fixed at build time, never in the state or the context), and ``config``, what model calls
forward (callbacks, tracing).

:class:`BoundNode` is what the builder registers for each node, for two things LangGraph
does not do itself: it hands the node the graph's ``bindings``, and it runs the node from
sync code (``invoke`` / ``stream``) on the library's background event loop
(:func:`~agentic_retrieval.graph.sync.run_sync`), so the same graph serves sync and async
callers, Jupyter included. It also turns a context given as a dict (Studio's configuration
panel) or only as ``config["configurable"]`` into a :class:`Context`
(:func:`resolve_context`), so every node reads the same typed settings.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, Literal, TypeVar, get_args, get_origin, get_type_hints

from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langgraph.config import get_config
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import Command

from agentic_retrieval.context import DEFAULTS_KEY, Context
from agentic_retrieval.graph.bindings import Bindings
from agentic_retrieval.graph.sync import run_sync
from agentic_retrieval.state import Update

InputT = TypeVar("InputT")

Output = Update | Command[Any]
"""What a node returns: a state update, or a ``Command`` (an update and where the run goes)."""

NodeBody = Callable[..., Awaitable[Output]]
"""A node: its input (the state, or a ``Send`` payload) and ``runtime: Runtime[Context]``, with
``bindings`` and ``config`` when it declares them, to a state update or a ``Command``."""


def destinations(body: NodeBody) -> tuple[str, ...]:
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

    def __init__(self, body: NodeBody, bindings: Bindings) -> None:
        self.body = body
        self.name = body.__name__
        self.bound = {"bindings": bindings} if _declares(body, "bindings") else {}
        self.wants_config = _declares(body, "config")

    async def ainvoke(
        self, input: InputT, config: RunnableConfig | None = None, **kwargs: Any
    ) -> Output:
        """Run the node (LangGraph calls this inside the run's config context)."""
        runtime: Runtime[Any] = get_runtime()
        if not isinstance(runtime.context, Context):
            runtime = runtime.override(context=resolve_context(runtime))
        if self.wants_config:
            return await self.body(input, runtime, config=ensure_config(config), **self.bound)
        return await self.body(input, runtime, **self.bound)

    def invoke(self, input: InputT, config: RunnableConfig | None = None, **kwargs: Any) -> Output:
        """Run the node from sync code, on the background loop (see the module docstring)."""
        return run_sync(self.ainvoke(input, config, **kwargs))


def _declares(body: NodeBody, name: str) -> bool:
    return name in inspect.signature(body).parameters


def resolve_context(runtime: Runtime[Any] | None) -> Context:
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
