"""What the graph streams while it runs (``stream_mode="custom"``): typed events.

Nodes write these with :func:`emit`, :func:`begin` and :func:`complete`; each is written to
the stream as the plain dict :meth:`to_stream` gives (the shape README.md documents, and what
LangGraph Studio shows):

- :class:`StepStarted` ``{"event": "activity.started", "key", "type", "startedAt",
  "knowledgeSourceName"?}`` and :class:`StepCompleted` ``{"event": "activity.completed",
  "key", "record"}`` (the record in the response's wire shape), one pair per activity record;
- the progress notes between them (:data:`AnyProgress`: ``planning``, ``searching``,
  ``searched``, ``reranking``, ``assessing``, ``following_up``, ``escalating``,
  ``answering``, ``done``), ``{"event": <step>, <fields in camelCase>}``.

Readers of the stream turn a progress note back into its class with :func:`progress_note`
and match on types (the command line does). :mod:`agentic_retrieval.wire.events` renders the
stream as the retrieve API's server-sent events.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, get_args

from langgraph.runtime import Runtime
from pydantic.alias_generators import to_camel

from agentic_retrieval.graph.records import Activity, AnyActivity, timestamp
from agentic_retrieval.sources.base import KnowledgeSource

ACTIVITY_STARTED = "activity.started"
ACTIVITY_COMPLETED = "activity.completed"


@dataclass(frozen=True)
class StepStarted:
    """A step began: its record key, the wire ``type`` its record will have, its start."""

    event: ClassVar[str] = ACTIVITY_STARTED

    key: str
    type: str
    started: float
    """:func:`step_clock` when the step started: the record's ``started``."""
    source: str | None = None
    """The knowledge source a search step queries."""
    clock: float = field(default_factory=time.perf_counter, compare=False)
    """``time.perf_counter()`` at the start: the base of :meth:`elapsed_ms`."""

    def elapsed_ms(self) -> int:
        """Milliseconds since the step started."""
        return round((time.perf_counter() - self.clock) * 1000)

    def to_stream(self) -> dict[str, Any]:
        """The stream item."""
        item = {
            "event": self.event,
            "key": self.key,
            "type": self.type,
            "startedAt": timestamp(self.started),
        }
        if self.source is not None:
            item["knowledgeSourceName"] = self.source
        return item


@dataclass(frozen=True)
class StepCompleted:
    """A step finished: its typed record."""

    event: ClassVar[str] = ACTIVITY_COMPLETED

    record: AnyActivity

    def to_stream(self) -> dict[str, Any]:
        """The stream item, the record in its wire shape."""
        return {"event": self.event, "key": self.record.key, "record": self.record.render()}


@dataclass(frozen=True)
class ProgressNote:
    """A progress note: what a node is doing (``event`` names it on the stream)."""

    event: ClassVar[str]

    def to_stream(self) -> dict[str, Any]:
        """``{"event": <step>, <fields in camelCase>}``."""
        return {
            "event": self.event,
            **{to_camel(f.name): getattr(self, f.name) for f in fields(self)},
        }


@dataclass(frozen=True)
class Planning(ProgressNote):
    """The planning model is planning the question."""

    event: ClassVar[str] = "planning"
    question: str


@dataclass(frozen=True)
class Searching(ProgressNote):
    """A round's searches are sent: subqueries and (subquery, source) searches."""

    event: ClassVar[str] = "searching"
    subqueries: int
    searches: int


@dataclass(frozen=True)
class Searched(ProgressNote):
    """One search finished (``error``: its message when it failed)."""

    event: ClassVar[str] = "searched"
    source: str
    query: str
    count: int
    elapsed_ms: int | None
    error: str | None


@dataclass(frozen=True)
class Reranking(ProgressNote):
    """The candidates retrieved so far are being reranked."""

    event: ClassVar[str] = "reranking"
    candidates: int


@dataclass(frozen=True)
class Assessing(ProgressNote):
    """The evidence model is judging the ranked passages."""

    event: ClassVar[str] = "assessing"
    passages: int


@dataclass(frozen=True)
class FollowingUp(ProgressNote):
    """A follow-up round is due."""

    event: ClassVar[str] = "following_up"
    subqueries: int


@dataclass(frozen=True)
class Escalating(ProgressNote):
    """The ``auto`` effort moves up a tier, and why."""

    event: ClassVar[str] = "escalating"
    to: str
    reason: str


@dataclass(frozen=True)
class Answering(ProgressNote):
    """The answer model is writing the answer."""

    event: ClassVar[str] = "answering"
    passages: int


@dataclass(frozen=True)
class Done(ProgressNote):
    """The response is assembled."""

    event: ClassVar[str] = "done"
    references: int


AnyProgress = (
    Planning
    | Searching
    | Searched
    | Reranking
    | Assessing
    | FollowingUp
    | Escalating
    | Answering
    | Done
)
PROGRESS_TYPES: dict[str, type[ProgressNote]] = {cls.event: cls for cls in get_args(AnyProgress)}
"""Each progress note's class, by the ``event`` name it has on the stream."""

GraphEvent = StepStarted | StepCompleted | AnyProgress
"""Anything a node emits."""


def progress_note(step: str, data: dict[str, Any]) -> ProgressNote | None:
    """The typed progress note named ``step`` with its stream fields, ``None`` if unknown.

    Args:
        step: The note's ``event`` name (the retrieve stream's ``progress.step``).
        data: Its fields as streamed (camelCase; other keys are ignored).
    """
    kind = PROGRESS_TYPES.get(step)
    if kind is None:
        return None
    return kind(**{f.name: data.get(to_camel(f.name)) for f in fields(kind)})


_clock_lock = threading.Lock()
_last_step_start = 0.0


def step_clock() -> float:
    """``time.time()``, made strictly increasing across calls (by a microsecond at least).

    Steps are numbered by start time in the response and by the order their
    ``activity.started`` events arrive on the stream; a clock that never repeats or goes
    back (parallel searches start microseconds apart) keeps the two numberings the same.
    """
    global _last_step_start
    with _clock_lock:
        _last_step_start = max(time.time(), _last_step_start + 1e-6)
        return _last_step_start


# --- what a node calls to write them (to the run's custom stream) ----------------------------


def emit(runtime: Runtime[Any], note: ProgressNote) -> None:
    """Write a progress note to the run's custom stream."""
    runtime.stream_writer(note.to_stream())


def begin(
    runtime: Runtime[Any],
    key: str,
    record: type[Activity],
    *,
    source: KnowledgeSource | None = None,
) -> StepStarted:
    """Announce a step whose record will be of class ``record``, and start its clock.

    Args:
        runtime: The node's runtime (its stream writer).
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
    runtime.stream_writer(step.to_stream())
    return step


def complete(runtime: Runtime[Any], record: AnyActivity) -> None:
    """Report a finished step with its record."""
    runtime.stream_writer(StepCompleted(record).to_stream())
