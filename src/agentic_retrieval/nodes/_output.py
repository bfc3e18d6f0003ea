"""The response's parts built from the ranked passages.

The grounding string, the passages a model reads, the references, and the warnings about
documents left out.

The shapes are the retrieve API's (``extractiveData``'s JSON array of ``{ref_id, title,
content}``, a reference's ``docKey`` / ``rerankerScore`` / ``sourceData``...), because they are
the graph's own output; :mod:`agentic_retrieval.wire` only wraps them in the response model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentic_retrieval.graph.records import RankedHit, SourceParams
from agentic_retrieval.graph.vocabulary import DropReason, wire_kind


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


def drop_warning(dropped: Mapping[DropReason, int], threshold: float | None) -> str | None:
    """The ``warning`` of a search record whose documents did not all reach the response.

    Azure drops such documents silently; saying how many, and why, tells a caller whether to
    lower ``rerankerThreshold`` or raise ``maxOutputDocuments`` / ``maxOutputSizeInTokens``.

    Args:
        dropped: How many documents were dropped, by reason.
        threshold: The source's effective ``rerankerThreshold``.
    """
    parts = []
    if dropped.get("threshold"):
        limit = f" ({threshold:g})" if threshold is not None else ""
        parts.append(f"{dropped['threshold']} scored under the rerankerThreshold{limit}")
    if dropped.get("maxOutputDocuments"):
        parts.append(f"{dropped['maxOutputDocuments']} exceeded maxOutputDocuments")
    if dropped.get("outputSize"):
        parts.append(
            f"{dropped['outputSize']} did not fit the output size limit "
            "(maxOutputSize / maxOutputSizeInTokens)"
        )
    total = sum(dropped.values())
    if not total:
        return None
    noun, verb = ("document", "was") if total == 1 else ("documents", "were")
    return f"{total} {noun} found by this query {verb} left out of the response: " + (
        "; ".join(parts) + "."
    )


def render_references(
    ranked: Sequence[RankedHit],
    ids: Mapping[str, int],
    params: SourceParams,
    kinds: Mapping[str, str],
    citation_urls: Mapping[tuple[str, str], str] | None = None,
) -> list[dict[str, Any]]:
    """The wire references of the passages the response is built on.

    Args:
        ranked: The grounded passages, best first.
        ids: Activity ids by record key (from :func:`render_activity`).
        params: The caller's per-source parameters (``includeReferences``,
            ``includeReferenceSourceData``).
        kinds: Each source's kind, by name.
        citation_urls: ``citationUrl`` by (source, doc key), where the source gave one.
    """
    references = []
    for hit in ranked:
        param = params.get(hit.source)
        if param is not None and param.include_references is False:
            continue
        reference: dict[str, Any] = {
            "type": wire_kind(kinds.get(hit.source, "searchIndex")),
            "id": str(hit.ref_id),
            "activitySource": ids.get(hit.activity_key, 0),
            "docKey": hit.doc_key,
        }
        if hit.graph_index is not None:
            # a graph result row or a hydrated source chunk: its data is what it is
            reference["type"], reference["graphIndexName"] = "graphSearch", hit.graph_index
        if hit.final_score is not None:  # None: resultsProcessing none, never reranked
            reference["rerankerScore"] = hit.final_score
        url = (citation_urls or {}).get((hit.source, hit.doc_key))
        if url:
            reference["citationUrl"] = url
        if hit.graph_index is not None or (
            param is not None and param.include_reference_source_data
        ):
            # metadata first: a metadata field must never replace the real key or text
            reference["sourceData"] = {
                **hit.metadata,
                "docKey": hit.doc_key,
                "title": hit.title,
                "content": hit.content,
            }
        references.append(reference)
    return references
