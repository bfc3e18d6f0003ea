"""Running one retrieve request from the command line (``retrieve`` and ``demo``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agentic_retrieval.cli.errors import UserError
from agentic_retrieval.errors import KnowledgeSourceFailedError, ModelRequiredError
from agentic_retrieval.graph.events import ProgressNote, progress_note
from agentic_retrieval.knowledge_base import GRACE_SECONDS, KnowledgeBase
from agentic_retrieval.permissions import Identity
from agentic_retrieval.wire.events import (
    ERROR,
    PROGRESS,
    RESPONSE_COMPLETED,
    completed_response,
)
from agentic_retrieval.wire.models import RetrieveResponse
from agentic_retrieval.wire.retrieve import conversation_request, prepare, timed_out_response


def build_request(
    kb: KnowledgeBase,
    question: str,
    effort: str | None,
    output_mode: str | None,
    filter_text: str | None,
    *,
    source_data: bool = False,
    max_output_documents: int | None = None,
) -> dict[str, Any]:
    """The wire request for one command-line question."""
    return conversation_request(
        [("user", question)],
        kb.sources,
        effort=effort,
        output_mode=output_mode,
        filter_add_on=filter_text,
        source_data=source_data,
        max_output_documents=max_output_documents,
    )


def run_retrieve(
    kb: KnowledgeBase,
    request: dict[str, Any],
    on_event: Callable[[ProgressNote], None] | None,
    identity: Identity | None = None,
) -> RetrieveResponse:
    """Run ``request``, reporting progress events to ``on_event``; bounded by its runtime.

    Raises:
        InvalidRequestError: Bad input (unknown source, bad filter...).
        UserError: The chosen --effort or --output-mode needs a chat model there is not.
    """
    try:
        parsed, context = prepare(request, kb.defaults, kb.bindings)
    except ModelRequiredError as exc:
        raise UserError(model_required_message(exc)) from None
    if on_event is None:
        return asyncio.run(kb.aretrieve(parsed, identity=identity))

    async def stream() -> RetrieveResponse:
        started = time.time()
        async for event in kb.astream(parsed, identity=identity, extensions={PROGRESS}):
            name, data = event["event"], event["data"]
            note = progress_note(data["step"], data) if name == PROGRESS else None
            if note is not None:
                on_event(note)
            elif name == RESPONSE_COMPLETED:
                return completed_response(data)
            elif name == ERROR:
                error = data["error"]
                if error["code"] == "KnowledgeSourceFailed":
                    cause = error["details"][0]
                    raise KnowledgeSourceFailedError(
                        error["target"], cause["code"], cause["message"]
                    )
                return timed_out_response(context, started)
        raise RuntimeError("the event stream ended without response.completed or error")

    async def bounded() -> RetrieveResponse:
        try:
            return await asyncio.wait_for(stream(), context.max_runtime_seconds + GRACE_SECONDS)
        except TimeoutError as exc:
            raise UserError(
                f"maxRuntimeInSeconds ({context.max_runtime_seconds:g} s) elapsed"
            ) from exc

    return asyncio.run(bounded())


def model_required_message(exc: ModelRequiredError) -> str:
    """A chosen effort or output mode needs a chat model, said in command-line terms."""
    if exc.setting == "effort":
        return (
            f"--effort {exc.value} needs a chat model ({exc.role}) and none is configured: "
            f"set {exc.env_var} (e.g. openai:gpt-4.1-mini), or leave --effort out to search "
            "without one"
        )
    return (
        f"--output-mode {exc.value} needs a chat model to write the answer and none is "
        f"configured: set {exc.env_var} (e.g. openai:gpt-4.1-mini), or leave --output-mode "
        "out to get the ranked passages"
    )
