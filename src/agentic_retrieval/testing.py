"""A scripted chat model for tests, notebooks and demos without an API key.

:class:`ScriptedChatModel` answers structured-output calls by schema name from a script,
through LangChain's real ``with_structured_output`` machinery (tool calling plus the pydantic
tool parser), and reports token usage like a provider would::

    model = ScriptedChatModel(script={
        "QueryPlan": [{"needs_retrieval": True, "queries": [{"query": "bike fares"}]}],
        "SynthesizedAnswer": [{"answer": "A day pass costs 6 euros [ref_id:0]."}],
    })

A script entry is a dict (the tool-call arguments), a string (plain text content: a model
that ignored the schema), or an exception instance (raised, like a provider error).

:class:`ScriptedToolCallingModel` drives agents offline: bound to tools
(``bind_tools``, as ``langchain.agents.create_agent`` and LangGraph's ``ToolNode`` loops do),
it replays planned turns, tool calls first and then a final answer::

    model = ScriptedToolCallingModel(turns=[
        {"tool_calls": [{"name": "search_hr", "args": {"query": "remote work days"}}]},
        "You may work remotely 3 days a week [ref_id:0].",
    ])
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, Field, PrivateAttr

TEXT = "text"
"""Script key for calls made without a structured-output schema."""


class Script:
    """Thread-safe queues of planned responses, by schema (tool) name."""

    def __init__(self, entries: dict[str, Sequence[Any]] | None = None) -> None:
        self._queues = {name: deque(items) for name, items in (entries or {}).items()}
        self._lock = threading.Lock()
        self.calls: list[tuple[str, list[BaseMessage]]] = []

    def pop(self, name: str, messages: list[BaseMessage]) -> Any:
        """Take the next planned response for ``name``."""
        with self._lock:
            self.calls.append((name, messages))
            queue = self._queues.get(name)
            if not queue:
                raise LookupError(f"ScriptedChatModel has no planned response left for {name!r}")
            return queue.popleft()

    def remaining(self) -> dict[str, int]:
        """How many planned responses are left, by name."""
        with self._lock:
            return {name: len(queue) for name, queue in self._queues.items()}

    def count(self, name: str | None = None) -> int:
        """How many calls were made (for ``name`` only, when given)."""
        with self._lock:
            return sum(1 for n, _ in self.calls if name is None or n == name)


class ScriptedChatModel(BaseChatModel):
    """A chat model that replays a script instead of calling a provider.

    Args:
        script: Planned responses by schema name (or a shared :class:`Script`).
        usage: Token usage reported per call (``input_tokens``, ``output_tokens``...).
        model_name: The model name activity records show.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: Any = Field(default_factory=Script)
    usage: dict[str, Any] = Field(
        default_factory=lambda: {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}
    )
    tool_name: str | None = None
    model_name: str = "scripted"
    """The name activity records show (``model.modelName``)."""
    _counter: list[int] = PrivateAttr(default_factory=lambda: [0])

    def model_post_init(self, context: Any) -> None:
        """Wrap a plain dict script in a :class:`Script`."""
        if isinstance(self.script, dict):
            self.script = Script(self.script)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> Runnable[Any, AIMessage]:
        """Return a copy that answers as the first tool (the structured-output schema)."""
        name = convert_to_openai_tool(tools[0])["function"]["name"] if tools else None
        bound = self.model_copy(update={"tool_name": name})
        bound._counter = self._counter
        return bound

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        name = self.tool_name or TEXT
        planned = self.script.pop(name, messages)
        if isinstance(planned, BaseException):
            raise planned
        self._counter[0] += 1
        usage = dict(self.usage)
        if isinstance(planned, str) or name == TEXT:
            message = AIMessage(content=str(planned), usage_metadata=usage)
        else:
            call = {"name": name, "args": dict(planned), "id": f"call_{self._counter[0]}"}
            message = AIMessage(content="", tool_calls=[call], usage_metadata=usage)
        return ChatResult(generations=[ChatGeneration(message=message)])


Turn = str | Mapping[str, Any] | AIMessage | BaseException | Callable[[list[BaseMessage]], Any]
"""One planned model turn (see :class:`ScriptedToolCallingModel`)."""


class ScriptedToolCallingModel(BaseChatModel):
    """A tool-calling chat model that replays planned turns, for agents without an API key.

    Each call takes the next turn:

    - a string: the final answer (an ``AIMessage`` with that content, no tool calls);
    - ``{"tool_calls": [{"name", "args"}, ...], "content"?: str}``: the tool calls to make
      (ids ``call_1``, ``call_2``... in the order made);
    - an ``AIMessage``: returned as it is;
    - a callable: called with the messages the model received, its result read as a turn
      (a final answer that quotes a tool's result, say);
    - an exception instance: raised, like a provider error.

    It behaves as a provider would with the tools it is bound to (``bind_tools``): a tool
    call to a tool it was not given is an error, and so is a text answer, or a call to
    another tool, while ``tool_choice`` forces a tool (``"any"``, ``"required"``, a tool name
    or ``{"type": "function", "function": {"name": ...}}``), so a script that contradicts
    how it is called fails loudly instead of passing. ``calls`` records every call: the
    messages, the bound tool names and the ``tool_choice``.

    Args:
        turns: The planned turns, in order (shared by every copy ``bind_tools`` returns).
        usage: Token usage reported per call.
        model_name: The model name.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    turns: Any = Field(default_factory=list)
    usage: dict[str, Any] = Field(
        default_factory=lambda: {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}
    )
    model_name: str = "scripted-agent"
    bound_tools: list[str] | None = None
    """The names of the tools this copy was bound to (``None``: unbound)."""
    tool_choice: Any = None
    """The ``tool_choice`` this copy was bound with."""
    _state: _TurnQueue = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        """Share one queue of turns between this model and the copies it binds."""
        self._state = self.turns if isinstance(self.turns, _TurnQueue) else _TurnQueue(self.turns)
        self.turns = self._state

    @property
    def _llm_type(self) -> str:
        return "scripted-tool-calling"

    @property
    def calls(self) -> list[dict[str, Any]]:
        """Every call made: ``{"messages", "tools", "tool_choice"}``, in order."""
        return self._state.calls

    @property
    def remaining(self) -> int:
        """How many planned turns are left."""
        return len(self._state.queue)

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> Runnable[Any, AIMessage]:
        """A copy bound to ``tools`` (by name), sharing this model's turns."""
        names = [convert_to_openai_tool(tool)["function"]["name"] for tool in tools]
        return self.model_copy(update={"bound_tools": names, "tool_choice": tool_choice})

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        turn = self._state.pop(messages, self.bound_tools, self.tool_choice)
        message = self._message(turn, messages)
        self._check(message)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _message(self, turn: Any, messages: list[BaseMessage]) -> AIMessage:
        if isinstance(turn, BaseException):
            raise turn
        if callable(turn) and not isinstance(turn, AIMessage):
            return self._message(turn(messages), messages)
        if isinstance(turn, AIMessage):
            return turn
        usage = dict(self.usage)
        if isinstance(turn, str):
            return AIMessage(content=turn, usage_metadata=usage)
        if isinstance(turn, Mapping) and isinstance(turn.get("tool_calls"), list):
            calls = [
                ToolCall(
                    name=str(call["name"]),
                    args=dict(call.get("args") or {}),
                    id=call.get("id") or self._state.next_call_id(),
                    type="tool_call",
                )
                for call in turn["tool_calls"]
            ]
            return AIMessage(
                content=str(turn.get("content") or ""),
                tool_calls=calls,
                usage_metadata=usage,
            )
        raise TypeError(
            "a turn is a string, {'tool_calls': [...]}, an AIMessage, a callable or an "
            f"exception; got {type(turn).__name__}"
        )

    def _check(self, message: AIMessage) -> None:
        """Refuse a turn a provider could not return, called the way this copy is."""
        names = [call["name"] for call in message.tool_calls]
        if names and self.bound_tools is None:
            raise ValueError(f"the script calls {names} but the model is bound to no tools")
        unknown = [n for n in names if n not in (self.bound_tools or [])]
        if unknown:
            raise ValueError(f"the script calls {unknown}, not among the bound tools")
        if names and self.tool_choice == "none":
            raise ValueError(f"tool_choice='none' forbids tool calls, but the script calls {names}")
        forced = _forced_tool(self.tool_choice)
        if forced is None:
            return
        if not names:
            raise ValueError(
                f"tool_choice={self.tool_choice!r} forces a tool call, but the script's turn "
                "is a text answer"
            )
        if forced is not True and any(n != forced for n in names):
            raise ValueError(f"tool_choice forces {forced!r}, but the script calls {names}")


class _TurnQueue:
    """The planned turns and the calls made, shared by a model and its bound copies."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self.queue: deque[Turn] = deque(turns)
        self.calls: list[dict[str, Any]] = []
        self._ids = 0
        self._lock = threading.Lock()

    def pop(self, messages: list[BaseMessage], tools: list[str] | None, tool_choice: Any) -> Turn:
        with self._lock:
            self.calls.append({"messages": messages, "tools": tools, "tool_choice": tool_choice})
            if not self.queue:
                raise LookupError("ScriptedToolCallingModel has no planned turn left")
            return self.queue.popleft()

    def next_call_id(self) -> str:
        with self._lock:
            self._ids += 1
            return f"call_{self._ids}"


def _forced_tool(tool_choice: Any) -> str | bool | None:
    """The tool ``tool_choice`` forces (``True``: any tool), or ``None`` when none is forced."""
    if tool_choice in (None, "auto", "none", False):
        return None
    if tool_choice in ("any", "required", True):
        return True
    if isinstance(tool_choice, str):
        return tool_choice
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
        return str(name) if name else True
    return True


class HashingEmbeddings(Embeddings):
    """Deterministic bag-of-words embeddings for tests: hashed word counts, L2-normalised.

    Cosine similarity is then the normalised overlap of the two texts' words, so relevant
    passages really do rank first, with no model download.

    Args:
        size: Number of hash buckets (the vector dimension).
        stopwords: Words left out of the vectors.
    """

    def __init__(
        self,
        size: int = 1024,
        stopwords: frozenset[str] = frozenset(
            {"the", "a", "an", "of", "and", "in", "on", "to", "is", "are", "for", "with"}
        ),
    ) -> None:
        self.size = size
        self.stopwords = stopwords

    def _embed(self, text: str) -> list[float]:
        vector = [0.0] * self.size
        for term in re.findall(r"\w+", text.lower()):
            if term not in self.stopwords:
                vector[int(hashlib.md5(term.encode()).hexdigest(), 16) % self.size] += 1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """Embed each text."""
        return [self._embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        """Embed the query."""
        return self._embed(text)
