"""What the store reads and writes, row by row: chunks to write, files it remembers, hits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

RECORD_PREFIX = "record:"
"""Path (and slug) prefix of the ``files`` rows that hold records rather than files."""


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """A chunk ready to be written."""

    id: str
    ordinal: int
    title: str
    content: str
    page: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FileState:
    """What the store remembers about an indexed file."""

    path: str
    slug: str
    content_hash: str
    fingerprint: str
    mtime: float
    size: int
    chunk_count: int


@dataclass(frozen=True, slots=True)
class StoredHit:
    """One search result, straight from the store."""

    id: str
    title: str
    content: str
    page: int | None
    metadata: dict[str, Any]
    score: float
    similarity: float | None = None
    """Cosine of the chunk's vector and the query's (hybrid search; ``None`` otherwise)."""


class MetadataJson(str):
    """A file's metadata already serialised: :meth:`LocalStore.replace_file` stores it as is.

    It must be what ``json.dumps(metadata, sort_keys=True, default=json_default)`` gives. A
    document of the documents API arrives as one large JSON body; its stored copy is
    serialised once to hash it, and parsing that text back only to serialise it again cost
    two more copies of a 15 MiB body at the peak of an upload.
    """

    __slots__ = ()


def json_default(value: Any) -> Any:
    """Serialise metadata values JSON does not know (dates as ISO 8601, sets as lists)."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"metadata value of type {type(value).__name__} is not JSON serialisable")
