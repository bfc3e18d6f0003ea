"""A retrieve response in words, for a reader that is a model or a person (tools, chat APIs)."""

from __future__ import annotations

import json
from typing import Any

from agentic_retrieval.text.citations import quote_markers
from agentic_retrieval.wire.models import RetrieveResponse


def failed_sources(response: RetrieveResponse) -> list[tuple[str, str]]:
    """``(source, error message)`` for each source whose search failed, once per source.

    These are what made the response partial (HTTP 206): the other sources' results are in.
    """
    failed: dict[str, str] = {}
    for record in response.activity or []:
        source = (record.model_extra or {}).get("knowledgeSourceName")
        if record.error is None or not isinstance(source, str) or source in failed:
            continue
        failed[source] = record.error.message or record.error.code or "failed"
    return list(failed.items())


def passages_text(grounding: str) -> str:
    """The grounding string (a JSON array of ``{ref_id, title, content}``) as readable text.

    Each passage is ``[ref_id:N] title`` and its content, best first, separated by a blank
    line; a marker inside a title or content is quoted (``(ref_id:N)``, see
    :func:`~agentic_retrieval.text.citations.quote_markers`), so the only bracketed ones are
    the service's. Text that is not such an array is returned as it is.
    """
    try:
        items: Any = json.loads(grounding)
    except ValueError:
        return grounding
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return grounding
    blocks = []
    for item in items:
        title, content = (quote_markers(str(item.get(k) or "")) for k in ("title", "content"))
        head = f"[ref_id:{item.get('ref_id')}] {title}".rstrip()
        blocks.append(f"{head}\n{content}".rstrip())
    return "\n\n".join(blocks)
