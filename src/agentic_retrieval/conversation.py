"""Reading the conversation: the question, and a transcript for prompts."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence

from langchain_core.messages import BaseMessage

from agentic_retrieval.context import Context

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
