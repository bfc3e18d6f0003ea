"""What a caller reads of an index document in a retrieve: its passage, title and sourceData.

An index document's chunks are written from all of its searchable fields, so a search finds
it by a field the caller may not read (Azure's semantics: a searchable field that is not
``retrievable``, or a ``permissionFilter`` field). What a retrieve *returns* holds readable
fields only (retrievable, not a permission field): a :class:`DocumentView` builds every
returned part of a hit from the stored document and the index definition as it is now.

The passage is decided when it is read, not when the chunks were written: a chunk's text is
returned only when it is, word for word, a stretch of the document's readable text;
otherwise the passage is the readable text itself (a short document) or the window of it
nearest the chunk. So stores written before this rule (whose chunks mix readable and hidden
text), and documents written before a field was made non-retrievable (``retrievable`` may
change on an existing field), never leak either, and no store is rewritten. The check costs
a substring search of the document's readable text (one pass over it with its whitespace
collapsed when the chunk's was), and only on indexes with a searchable field that is not
readable (:attr:`DocumentView.chunks_may_hide`); ``benchmarks/bench_hidden_fields.py``
measures it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentic_retrieval.sources.local.chunking import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_OVERLAP,
    chunk_text,
    normalize_text,
)

_ANCHOR_WORDS = 8
"""Words of a chunk's readable paragraph that locate it in the readable text."""


def field_text(value: Any) -> str:
    """The text a field's value contributes to a document's chunks (strings only)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(item for item in value if isinstance(item, str))
    return ""


@dataclass(frozen=True, slots=True)
class DocumentView:
    """The readable parts of an index's documents, as a retrieve returns them.

    Attributes:
        title_field: The semantic title field, when a caller may read it.
        text_fields: The readable searchable fields but the title, in the index's order:
            the text a passage is taken from.
        source_data_fields: The fields of ``sourceData`` (and of the citation URL's select).
        chunks_may_hide: Some searchable field is not readable, so a chunk's text may hold
            what a caller may not read (else every chunk is returned as it is).
        chunk_size: The store's chunk size (a window of a long document is one chunk).
        overlap: The store's chunk overlap.
    """

    title_field: str | None
    text_fields: tuple[str, ...]
    source_data_fields: tuple[str, ...]
    chunks_may_hide: bool
    chunk_size: int = DEFAULT_CHUNK_SIZE
    overlap: int = DEFAULT_OVERLAP

    def title(self, document: Mapping[str, Any]) -> str | None:
        """The document's title, when its title field is readable and set."""
        value = document.get(self.title_field) if self.title_field else None
        return value if isinstance(value, str) and value else None

    def source_data(self, document: Mapping[str, Any]) -> dict[str, Any]:
        """The ``sourceData`` fields the document has."""
        return {name: document[name] for name in self.source_data_fields if name in document}

    def passage(self, document: Mapping[str, Any], chunk: str) -> str:
        """The text a hit on ``chunk`` of ``document`` returns: readable text only.

        ``chunk`` as it is when its words are a stretch of the readable text; otherwise the
        readable text (when it fits one chunk) or its window nearest the chunk.
        """
        if not self.chunks_may_hide:
            return chunk
        texts = (field_text(document.get(name)) for name in self.text_fields)
        readable = "\n\n".join(text for text in texts if text)
        if chunk in readable:  # the common case, without normalising anything
            return chunk
        flat = " ".join(readable.split())
        if " ".join(chunk.split()) in flat:
            return chunk
        if len(flat) <= self.chunk_size:
            return normalize_text(readable)
        return self._window(readable, flat, chunk)

    def _window(self, readable: str, flat: str, chunk: str) -> str:
        """The chunk of ``readable`` where the longest readable paragraph of ``chunk`` is.

        Only a region around it is chunked, so the cost stays near one chunk's however long
        the document; with no readable paragraph in ``chunk``, the document's first chunk.
        """
        paragraphs = (" ".join(p.split()) for p in chunk.split("\n\n"))
        found = [p for p in paragraphs if p and p in flat]
        anchor = max(found, key=len).split()[:_ANCHOR_WORDS] if found else []
        at = 0
        if anchor:
            located = re.search(r"\s+".join(map(re.escape, anchor)), readable)
            at = located.start() if located else 0
        region = readable[max(0, at - self.chunk_size) : at + 2 * self.chunk_size]
        pieces = chunk_text(region, self.chunk_size, self.overlap)
        key = " ".join(anchor)
        return next((p for p in pieces if key in " ".join(p.split())), pieces[0] if pieces else "")
