"""Rendering ranked hits for models and callers: passages, the grounding string, references."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentic_retrieval.state import RankedHit


def format_passages(ranked: Sequence[RankedHit], max_chars: int) -> str:
    """Passages as ``[ref_id:N] title`` + content blocks, best first, whole passages only."""
    blocks: list[str] = []
    size = 0
    for hit in ranked:
        block = f"[ref_id:{hit.ref_id}] {hit.title or ''}".rstrip() + f"\n{hit.content}"
        if size + len(block) > max_chars and blocks:
            break
        blocks.append(block)
        size += len(block)
    return "\n\n".join(blocks)


def grounding_items(ranked: Sequence[RankedHit]) -> list[dict[str, Any]]:
    """One grounding object per ranked hit: ``ref_id``, ``title``, ``content`` (+ page/url)."""
    items = []
    for hit in ranked:
        item: dict[str, Any] = {
            "ref_id": hit.ref_id,
            "title": hit.title or "",
            "content": hit.content,
        }
        for extra in ("page", "url"):
            if hit.metadata.get(extra) is not None:
                item[extra] = hit.metadata[extra]
        items.append(item)
    return items


def grounding_string(
    ranked: Sequence[RankedHit], max_chars: int, max_tokens: int | None = None
) -> tuple[str, list[RankedHit]]:
    """The extractive response: a JSON array of grounding objects within the size bounds.

    Whole chunks are dropped from the lowest-ranked end until the string fits
    ``max_chars`` (and ``max_tokens`` estimated as characters / 4).

    Returns:
        The JSON string and the hits it contains.
    """
    limit = max_chars if max_tokens is None else min(max_chars, max_tokens * 4)
    kept: list[RankedHit] = []
    items: list[dict[str, Any]] = []
    size = 2  # the brackets
    for hit, item in zip(ranked, grounding_items(ranked), strict=True):
        encoded = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        extra = len(encoded) + (1 if items else 0)
        if size + extra > limit:
            break
        items.append(item)
        kept.append(hit)
        size += extra
    text = json.dumps(items, ensure_ascii=False, separators=(",", ":"))
    return text, kept
