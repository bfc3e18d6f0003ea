"""Rendering ranked hits for models and callers: passages, the grounding string, references."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agentic_retrieval.state import RankedHit


def format_passages(ranked: Sequence[RankedHit], max_chars: int) -> tuple[str, list[int]]:
    """Passages as ``[ref_id:N] title`` + content blocks, best first, whole passages only.

    Returns:
        The text and the ref_ids it includes (what a model can legitimately cite).
    """
    blocks: list[str] = []
    shown: list[int] = []
    size = 0
    for hit in ranked:
        block = f"[ref_id:{hit.ref_id}] {hit.title or ''}".rstrip() + f"\n{hit.content}"
        if size + len(block) > max_chars and blocks:
            break
        blocks.append(block)
        shown.append(hit.ref_id)
        size += len(block)
    return "\n\n".join(blocks), shown


def estimate_tokens(text: str) -> int:
    """A conservative token estimate: 4 ASCII characters per token, one per other character.

    CJK and most non-Latin scripts take at least one token per character in common
    tokenizers, so ``len / 4`` would overshoot a token budget several times for them.
    """
    if text.isascii():
        return -(-len(text) // 4)
    other = sum(1 for ch in text if ord(ch) > 127)
    return -(-(len(text) - other) // 4) + other


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
    ``max_chars`` characters and ``max_tokens`` (see :func:`estimate_tokens`).

    Returns:
        The JSON string and the hits it contains.
    """
    kept: list[RankedHit] = []
    items: list[dict[str, Any]] = []
    size, tokens = 2, 1  # the brackets
    for hit, item in zip(ranked, grounding_items(ranked), strict=True):
        encoded = json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        extra = len(encoded) + (1 if items else 0)
        extra_tokens = estimate_tokens(encoded) + (1 if items else 0)
        if size + extra > max_chars or (
            max_tokens is not None and tokens + extra_tokens > max_tokens
        ):
            break
        items.append(item)
        kept.append(hit)
        size += extra
        tokens += extra_tokens
    text = json.dumps(items, ensure_ascii=False, separators=(",", ":"))
    return text, kept
