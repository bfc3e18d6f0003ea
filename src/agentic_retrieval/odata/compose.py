"""Combining filter texts so each part can only narrow the others."""

from __future__ import annotations


def and_filters(*filters: str | None) -> str | None:
    """AND the non-empty filters together, each in parentheses.

    This is how a caller's ``filterAddOn`` or a source's own filter is combined with a
    planner's filter: the result can only narrow what each part allows, never widen it (an
    ``or`` inside one part cannot escape its parentheses). A single filter is returned as
    is, so combining in two places never stacks parentheses.

    Returns:
        ``"(a) and (b)"``, ``"a"`` for one filter, or ``None`` when every filter is ``None``
        or blank.

    """
    parts = [f.strip() for f in filters if f is not None and f.strip()]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return " and ".join(f"({part})" for part in parts)
