"""CSV, JSON and Office documents (DOCX, PPTX, XLSX) as titled text sections.

Which converter, and why:

- **CSV**: one section per row, each ``column: value`` on its own line, so a row is found
  by any of its values and read with its headers — the shape of ``langchain-community``'s
  ``CSVLoader``, written with the standard ``csv`` module so the core install needs nothing
  more.
- **JSON**: one section per element of a top-level array (otherwise one section), each leaf
  as a ``path.to.key: value`` line. (``langchain-community``'s ``JSONLoader`` needs ``jq``
  and a schema per file; this needs neither.)
- **DOCX, PPTX, XLSX**: Microsoft's ``markitdown`` (extra ``office``), which keeps headings
  and tables as Markdown. One section per slide (numbered as pages) and per sheet.
  ``langchain-community``'s loaders fall short here: ``Docx2txtLoader`` flattens tables and
  headings, and the PowerPoint and Excel loaders need ``unstructured``, a far heavier
  install that fetches NLTK data at run time (it fails offline). markitdown's format-specific
  converters are called directly: its generic entry point would read a corrupt file as
  plain text instead of failing.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_retrieval.errors import LoaderError, MissingConverterError
from agentic_retrieval.sources.local.loaders import (
    LoadedDocument,
    Section,
    decode_text,
    title_from_filename,
)

OFFICE_EXTENSIONS = frozenset({".docx", ".pptx", ".xlsx"})
OFFICE_EXTRA = "office"
MAX_CSV_FIELD = 1_000_000
_SLIDE = re.compile(r"^<!-- Slide number: (\d+) -->\s*$", re.MULTILINE)
_SHEET = re.compile(r"^## (.+)$", re.MULTILINE)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_TABLE_RULE = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+\s*$", re.MULTILINE)
_MAX_TITLE = 120


def load_csv(path: Path, data: bytes) -> LoadedDocument:
    """One section per row: ``column: value`` lines (headers from the first row)."""
    text = decode_text(path, data)
    csv.field_size_limit(MAX_CSV_FIELD)
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    try:
        rows = list(csv.DictReader(io.StringIO(text), dialect=dialect))
    except csv.Error as exc:
        raise LoaderError(f"unreadable CSV: {exc}") from exc
    sections = []
    for row in rows:
        lines = [f"{key}: {value}" for key, value in row.items() if key and value]
        if lines:
            sections.append(Section("\n".join(lines)))
    return LoadedDocument(title_from_filename(path), tuple(sections))


def load_json(path: Path, data: bytes) -> LoadedDocument:
    """Leaves as ``path.to.key: value`` lines; one section per element of a top array."""
    try:
        value = json.loads(decode_text(path, data))
        items = value if isinstance(value, list) and value else [value]
        sections = tuple(Section("\n".join(_json_lines(item, ""))) for item in items)
    except RecursionError as exc:
        raise LoaderError("JSON nested too deeply") from exc
    except ValueError as exc:
        raise LoaderError(f"invalid JSON: {exc}") from exc
    title = value.get("title") if isinstance(value, dict) else None
    if not isinstance(title, str) or not title.strip():
        title = title_from_filename(path)
    return LoadedDocument(title[:_MAX_TITLE], tuple(s for s in sections if s.text.strip()))


def load_office(path: Path, data: bytes) -> LoadedDocument:
    """A DOCX, PPTX or XLSX file through markitdown's converter for that format.

    Raises:
        MissingConverterError: The ``office`` extra is not installed.
        LoaderError: The file is corrupt or not of the format its extension claims.
    """
    converter = _office_converter(path.suffix.lower())
    from markitdown import StreamInfo

    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise LoaderError(f"not a valid {path.suffix.lower()} file (not an Office ZIP package)")
    try:
        result = converter.convert(
            io.BytesIO(data), StreamInfo(extension=path.suffix.lower(), filename=path.name)
        )
    # each format's reader raises its own errors on damaged files (zip, XML, KeyError...)
    except Exception as exc:
        kind = path.suffix.lower()
        raise LoaderError(f"unreadable {kind} file (damaged, or not a {kind} document)") from exc
    markdown = _TABLE_RULE.sub("", result.text_content or "")
    sections = _office_sections(path.suffix.lower(), markdown)
    heading = _HEADING.search(markdown)
    title = (result.title or (heading.group(1) if heading else "")).strip()
    return LoadedDocument(title[:_MAX_TITLE] or title_from_filename(path), sections)


def _office_converter(extension: str) -> Any:
    try:
        from markitdown.converters import DocxConverter, PptxConverter, XlsxConverter
    except ImportError as exc:
        raise MissingConverterError(
            f"reading {extension} files needs the [{OFFICE_EXTRA}] extra: pip install "
            f"'agentic-retrieval[{OFFICE_EXTRA}]'"
        ) from exc
    converters: dict[str, Callable[[], Any]] = {
        ".docx": DocxConverter,
        ".pptx": PptxConverter,
        ".xlsx": XlsxConverter,
    }
    return converters[extension]()


def _office_sections(extension: str, markdown: str) -> tuple[Section, ...]:
    if extension == ".pptx":
        parts = _SLIDE.split(markdown)
        # split() gives [before, number, text, number, text...]
        return tuple(
            Section(text.strip(), page=int(number))
            for number, text in zip(parts[1::2], parts[2::2], strict=True)
            if text.strip()
        )
    if extension == ".xlsx":
        starts = [m.start() for m in _SHEET.finditer(markdown)] or [0]
        pieces = [markdown[a:b] for a, b in zip(starts, [*starts[1:], len(markdown)], strict=True)]
        return tuple(Section(piece.strip()) for piece in pieces if piece.strip())
    return (Section(markdown),) if markdown.strip() else ()


def _json_lines(value: Any, prefix: str) -> list[str]:
    if isinstance(value, dict):
        lines: list[str] = []
        for key, item in value.items():
            lines += _json_lines(item, f"{prefix}.{key}" if prefix else str(key))
        return lines
    if isinstance(value, list):
        if all(not isinstance(item, dict | list) for item in value):
            return [f"{prefix or 'items'}: {', '.join(_scalar(item) for item in value)}"]
        lines = []
        for n, item in enumerate(value):
            lines += _json_lines(item, f"{prefix}[{n}]")
        return lines
    return [f"{prefix or 'value'}: {_scalar(value)}"]


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
