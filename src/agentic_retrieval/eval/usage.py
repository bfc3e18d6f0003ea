"""Model calls and tokens of one retrieval, counted from LangChain callbacks.

Every chat-model call the run makes (planning, evidence, answer, an LLM reranker; retries
included) reports its start and its usage metadata to the callbacks in the run's config.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, LLMResult


@dataclass
class ModelCall:
    """One chat-model call: its model name (when the model reports one) and tokens."""

    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


class UsageCounter(BaseCallbackHandler):
    """Counts chat-model calls and their tokens (thread-safe; one counter per question)."""

    run_inline = True  # called in the run's own task, not in an executor

    def __init__(self) -> None:
        self.calls: dict[UUID, ModelCall] = {}
        self._lock = threading.Lock()

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Count the call; remember the model name LangChain reports for it."""
        name = (metadata or {}).get("ls_model_name")
        with self._lock:
            self.calls[run_id] = ModelCall(model=str(name) if name else None)

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """Add the call's usage metadata."""
        with self._lock:
            call = self.calls.setdefault(run_id, ModelCall())
        for generations in response.generations:
            for generation in generations:
                message = generation.message if isinstance(generation, ChatGeneration) else None
                if isinstance(message, AIMessage) and message.usage_metadata:
                    usage = message.usage_metadata
                    call.input_tokens += int(usage.get("input_tokens") or 0)
                    call.output_tokens += int(usage.get("output_tokens") or 0)
                    details = usage.get("output_token_details") or {}
                    call.reasoning_tokens += int(details.get("reasoning") or 0)
                    model = (message.response_metadata or {}).get("model_name")
                    if model:
                        call.model = str(model)

    def totals(self) -> UsageTotals:
        """Calls and tokens so far."""
        with self._lock:
            calls = list(self.calls.values())
        return UsageTotals(
            model_calls=len(calls),
            input_tokens=sum(c.input_tokens for c in calls),
            output_tokens=sum(c.output_tokens for c in calls),
            reasoning_tokens=sum(c.reasoning_tokens for c in calls),
            calls=calls,
        )


@dataclass
class UsageTotals:
    """The model usage of one question."""

    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    calls: list[ModelCall] = field(default_factory=list)
