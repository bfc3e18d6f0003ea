"""Citation checking: an answer may cite only ref_ids present in the references."""

from __future__ import annotations

import re
from collections.abc import Collection

CITATION = re.compile(r"\[\s*ref_id\s*:\s*(\d+)\s*\]", re.IGNORECASE)
_GROUP = re.compile(r"\[\s*ref_id\s*:\s*(\d+(?:\s*,\s*(?:ref_id\s*:\s*)?\d+)+)\s*\]", re.IGNORECASE)


def cited_ids(answer: str) -> list[int]:
    """ref_ids cited in ``answer`` as ``[ref_id:N]``, in order of first citation."""
    seen: list[int] = []
    for match in CITATION.finditer(normalize_citations(answer)):
        value = int(match.group(1))
        if value not in seen:
            seen.append(value)
    return seen


def normalize_citations(answer: str) -> str:
    """Split grouped citations ``[ref_id:1, 2]`` into ``[ref_id:1][ref_id:2]``."""

    def split(match: re.Match[str]) -> str:
        numbers = re.findall(r"\d+", match.group(1))
        return "".join(f"[ref_id:{n}]" for n in numbers)

    return _GROUP.sub(split, answer)


def validate_citations(answer: str, valid: Collection[int]) -> tuple[str, list[int]]:
    """Strip citations of ref_ids not in ``valid``.

    Returns:
        The repaired answer (canonical ``[ref_id:N]`` markers) and the removed ids.
    """
    removed: list[int] = []

    def keep_or_drop(match: re.Match[str]) -> str:
        value = int(match.group(1))
        if value in valid:
            return f"[ref_id:{value}]"
        removed.append(value)
        return ""

    repaired = CITATION.sub(keep_or_drop, normalize_citations(answer))
    repaired = re.sub(r"[ \t]+([.,;:!?])", r"\1", repaired)
    return repaired.strip(), removed
