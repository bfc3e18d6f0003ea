"""structured_call: LangChain retries; this module keeps the deadline, tokens and outcome."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableLambda
from pydantic import BaseModel

from agentic_retrieval.llm.chat_models import structured_call
from agentic_retrieval.testing import ScriptedChatModel

PROMPT = [HumanMessage("q")]


class Plan(BaseModel):
    query: str


class SlowSecondCall(ScriptedChatModel):
    """Answers the first call from the script; the second never comes back in time."""

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kw: Any) -> ChatResult:
        if self.script.count() >= 1:
            self.script.calls.append(("slow", messages))
            await asyncio.sleep(10)
        return self._generate(messages, *args, **kw)


async def test_a_valid_retry_is_used_and_both_attempts_are_counted() -> None:
    model = ScriptedChatModel(script={"Plan": ["not json", {"query": "bikes"}]})
    result = await structured_call(model, Plan, PROMPT)
    assert result.value == Plan(query="bikes")
    assert result.error is None
    assert (result.usage.input_tokens, result.usage.output_tokens) == (240, 60)
    assert model.script.count("Plan") == 2


async def test_the_deadline_covers_every_attempt_and_keeps_the_failed_attempts_tokens() -> None:
    model = SlowSecondCall(script={"Plan": ["not json", {"query": "late"}]})
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await structured_call(model, Plan, PROMPT, timeout=0.3)
    assert loop.time() - started < 5
    assert result.value is None
    assert (result.error_code, result.error) == ("Timeout", "timed out before the model answered")
    assert result.usage.input_tokens == 120  # the unparsable first answer was paid for


async def test_a_provider_error_is_named_without_its_text(caplog: pytest.LogCaptureFixture) -> None:
    secret = RuntimeError("401 for key sk-live-abc123")
    model = ScriptedChatModel(script={"Plan": [secret, secret]})
    with caplog.at_level(logging.WARNING, logger="agentic_retrieval.llm.chat_models"):
        result = await structured_call(model, Plan, PROMPT)
    assert result.value is None
    assert result.error_code == "ModelError"
    assert result.error == "the model call failed; the server log has the details"
    assert "sk-live" not in result.error
    assert result.cause is secret  # a library caller may raise its own error with it
    assert "sk-live-abc123" in caplog.text  # the log keeps what the client does not see
    assert model.script.count("Plan") == 2


async def test_output_that_never_parses_is_model_output_invalid() -> None:
    model = ScriptedChatModel(script={"Plan": ["nope", {"query": 3, "x": None}]})
    result = await structured_call(model, Plan, PROMPT)
    assert result.value is None
    assert result.error_code == "ModelOutputInvalid"
    assert result.error is not None and "Plan" in result.error
    assert result.usage.input_tokens == 240


async def test_attempts_bounds_the_calls() -> None:
    model = ScriptedChatModel(script={"Plan": ["a", "b", "c", {"query": "d"}]})
    result = await structured_call(model, Plan, PROMPT, attempts=3)
    assert result.value is None
    assert model.script.count("Plan") == 3


class DictOutput(ScriptedChatModel):
    """A provider whose structured output comes back as a plain dict (json mode)."""

    def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:
        def answer(messages: list[BaseMessage]) -> dict[str, Any]:
            raw = self.invoke(messages)
            return {"raw": raw, "parsed": {"unexpected": raw.content}, "parsing_error": None}

        return RunnableLambda(answer)


async def test_a_dict_that_does_not_validate_is_said_to_not_match_the_schema() -> None:
    model = DictOutput(script={"text": ["a", "b"]})
    result = await structured_call(model, Plan, PROMPT)
    assert result.value is None
    assert result.error_code == "ModelOutputInvalid"
    assert result.error == "the model's output did not match the Plan schema"
    assert result.usage.input_tokens == 240
