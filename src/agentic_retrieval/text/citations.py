"""Citation checking: an answer may cite only ref_ids present in the references.

Models write citations in many shapes (``[ref_id:3]``, ``[ref_id: 1, 2]``, ``[ref_id:1-2]``,
``[[ref_id:4]]``, ``[ref_id:05]``); every bracket that starts with ``ref_id`` is parsed, the
ids that are references are rewritten canonically as ``[ref_id:N]`` and the others are
removed. Text outside removed markers is never touched.
"""

from __future__ import annotations

import re
from collections.abc import Collection

CITATION = re.compile(r"\[+\s*ref_id\b[^\[\]\n]*\]+", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_GONE = "\x00"


def quote_markers(text: str) -> str:
    """``text`` from a document with every would-be citation made plainly not one.

    A passage shown beside the service's own ``[ref_id:N]`` markers could plant a fake one
    (``[ref_id:999]``) that a reader or a client parsing the markers takes for a citation:
    its square brackets become round ones (``(ref_id:999)``), so every bracketed marker in
    the text is the service's.
    """
    return CITATION.sub(lambda m: "(" + m.group(0).strip("[]") + ")", text)


def _ids(marker: str) -> list[int | None]:
    """Numbers in a marker: ints, or ``None`` for a number that is not a whole id."""
    values: list[int | None] = []
    for token in _NUMBER.findall(marker):
        number = float(token)
        values.append(int(number) if number.is_integer() else None)
    return values


def cited_ids(answer: str) -> list[int]:
    """ref_ids cited in ``answer``, in order of first citation."""
    seen: list[int] = []
    for match in CITATION.finditer(answer):
        for value in _ids(match.group(0)):
            if value is not None and value not in seen:
                seen.append(value)
    return seen


def validate_citations(answer: str, valid: Collection[int]) -> tuple[str, list[int]]:
    """Keep citations of ``valid`` ref_ids (canonical form), remove every other one.

    Returns:
        The repaired answer and the removed ids (non-whole numbers are dropped silently).
    """
    removed: list[int] = []

    def rewrite(match: re.Match[str]) -> str:
        kept: list[int] = []
        for value in _ids(match.group(0)):
            if value is not None and value in valid:
                if value not in kept:
                    kept.append(value)
            elif value is not None and value not in removed:
                removed.append(value)
        return "".join(f"[ref_id:{v}]" for v in kept) or _GONE

    repaired = CITATION.sub(rewrite, answer)
    # close the gap a removed marker leaves, and only there
    repaired = re.sub(rf"^{_GONE}+[ \t]*", "", repaired, flags=re.MULTILINE)
    repaired = re.sub(rf"[ \t]*{_GONE}+(?=[.,;:!?)]|$)", "", repaired, flags=re.MULTILINE)
    repaired = re.sub(rf"[ \t]*{_GONE}+", "", repaired)
    return repaired.rstrip(), removed
