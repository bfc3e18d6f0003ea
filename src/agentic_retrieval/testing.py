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
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.embeddings import Embeddings
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
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
