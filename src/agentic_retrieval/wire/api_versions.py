"""What differs between the api-versions this service accepts, applied to the wire bodies.

Every api-version gets the same run; only the shape of what it reads back may differ, and a
version's shape never changes once published, so an older client reads today what it read
before the newer version existed:

- ``2026-11-01-preview`` stamps every activity record with ``startedAt`` and ``completedAt``
  (ISO 8601 UTC, as every version since ``2026-10-01`` already reads them) and
  ``elapsedInMs``, which Azure's reference describes as the record's elapsed time in
  milliseconds, kept for clients of earlier previews: the same value as ``elapsedMs``.
- ``graphParameters`` (graph search) and ``topicGraph`` (topic sampling) in
  ``knowledgeSourceParams`` are ``2026-11-01-preview``'s:
  an older version is refused with a 400 (its clients could not read the ``graphSearch``
  records and references it brings), as management refuses that version's definitions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from agentic_retrieval.errors import InvalidRequestError
from agentic_retrieval.graph.events import ACTIVITY_COMPLETED
from agentic_retrieval.wire.events import ERROR, RESPONSE_COMPLETED, RetrieveEvent

TIMED_ACTIVITY_VERSIONS = frozenset({"2026-11-01-preview"})
"""api-versions whose activity records carry ``elapsedInMs`` beside ``elapsedMs``."""
GRAPH_VERSIONS = frozenset({"2026-11-01-preview"})
"""api-versions that read ``graphParameters`` (and ``graphSearch`` records and references)."""


def check_request_fields(body: Mapping[str, Any], api_version: str | None) -> None:
    """Refuse a retrieve request field that ``api_version`` does not define.

    Raises:
        InvalidRequestError: ``graphParameters`` or ``topicGraph`` under a version before
            ``2026-11-01-preview``.
    """
    if api_version in GRAPH_VERSIONS:
        return
    params = body.get("knowledgeSourceParams")
    for position, entry in enumerate(params if isinstance(params, list) else []):
        if isinstance(entry, Mapping) and entry.get("graphParameters") is not None:
            raise InvalidRequestError(
                f"knowledgeSourceParams[{position}].graphParameters: graph search needs "
                f"api-version {min(GRAPH_VERSIONS)}"
            )
        if isinstance(entry, Mapping) and entry.get("topicGraph") is not None:
            raise InvalidRequestError(
                f"knowledgeSourceParams[{position}].topicGraph: topic graphs need "
                f"api-version {min(GRAPH_VERSIONS)}"
            )


def stamps_activity(api_version: str | None) -> bool:
    """Whether ``api_version`` reads ``elapsedInMs`` on every activity record."""
    return api_version in TIMED_ACTIVITY_VERSIONS


def response_for_version(body: dict[str, Any], api_version: str | None) -> dict[str, Any]:
    """A retrieve response body (``to_wire()``) in the shape ``api_version`` reads."""
    if not stamps_activity(api_version) or not body.get("activity"):
        return body
    return {**body, "activity": [stamp_record(r) for r in body["activity"]]}


def event_for_version(event: RetrieveEvent, api_version: str | None) -> RetrieveEvent:
    """A retrieve event in the shape ``api_version`` reads (records stamped as above)."""
    if not stamps_activity(api_version):
        return event
    name, data = event["event"], event["data"]
    if name == ACTIVITY_COMPLETED:
        return {"event": name, "data": stamp_record(data)}
    if name == ERROR and isinstance(data, dict) and data.get("activity"):
        return {
            "event": name,
            "data": {**data, "activity": [stamp_record(r) for r in data["activity"]]},
        }
    if name == RESPONSE_COMPLETED and isinstance(data, dict) and data.get("response"):
        return {
            "event": name,
            "data": {**data, "response": response_for_version(data["response"], api_version)},
        }
    return event


def stamp_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` with ``startedAt``, ``completedAt`` and ``elapsedInMs``.

    ``elapsedInMs`` is ``elapsedMs`` where the record has it; a record without one (the
    reasoning summary, a runtime limit) takes the span between its two times, or 0.
    """
    stamped = dict(record)
    elapsed = stamped.get("elapsedMs")
    started, completed = stamped.get("startedAt"), stamped.get("completedAt")
    if elapsed is None:
        elapsed = _span_ms(started, completed)
    if started is None:  # a record built outside the graph (a 408's runtimeLimit)
        stamped["startedAt"] = stamped["completedAt"] = _now()
    elif completed is None:
        stamped["completedAt"] = started
    stamped["elapsedInMs"] = elapsed
    return stamped


def _span_ms(started: Any, completed: Any) -> int:
    try:
        begin = dt.datetime.fromisoformat(str(started))
        end = dt.datetime.fromisoformat(str(completed))
    except ValueError:
        return 0
    return max(round((end - begin).total_seconds() * 1000), 0)


def _now() -> str:
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")
