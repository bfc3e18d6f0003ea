"""CSV, JSON and Office documents (DOCX, PPTX, XLSX) as titled text sections.

Which converter, and why:

- **CSV**: one section per row, each ``column: value`` on its own line, so a row is found
  by any of its values and read with its headers — the shape of ``langchain-community``'s
  ``CSVLoader``, written with the standard ``csv`` module so the core install needs nothing
  more.
- **JSON**: one section per element of a top-level array (otherwise one section), each leaf
  as a ``path.to.key: value`` line. (``langchain-community``'s ``JSONLoader`` needs ``jq``
  and a schema per file; this needs neither.)
- **DOCX, PPTX**: Microsoft's ``markitdown`` (extra ``office``), which keeps headings
  and tables as Markdown. One section per slide (numbered as pages).
  ``langchain-community``'s loaders fall short here: ``Docx2txtLoader`` flattens tables and
  headings, and the PowerPoint and Excel loaders need ``unstructured``, a far heavier
  install that fetches NLTK data at run time (it fails offline). markitdown's format-specific
  converters are called directly: its generic entry point would read a corrupt file as
  plain text instead of failing.
- **XLSX**: one Markdown table per sheet, in markitdown's shape, from a streaming reader
  (:mod:`.spreadsheets`; markitdown's pandas path costs minutes and gigabytes on sheets a
  few hundred kilobytes long).

Every Office file's ZIP package is checked before it is read (:mod:`.archives`), and CSV,
JSON arrays and sheets are bounded in rows and cells (:class:`.ConversionLimits`).
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_retrieval.errors import (
    ConversionLimitError,
    LoaderError,
    MissingConverterError,
    install_hint,
)
from agentic_retrieval.sources.local.archives import open_office_package
from agentic_retrieval.sources.local.conversion_limits import ConversionLimits
from agentic_retrieval.sources.local.loaders import (
    LoadedDocument,
    Section,
    decode_text,
    title_from_filename,
)

OFFICE_EXTENSIONS = frozenset({".docx", ".pptx", ".xlsx"})
OFFICE_EXTRA = "office"
_CONVERTER_MODULES = {".docx": "markitdown", ".pptx": "markitdown", ".xlsx": "openpyxl"}
MAX_CSV_FIELD = 1_000_000
_SLIDE = re.compile(r"^<!-- Slide number: (\d+) -->\s*$", re.MULTILINE)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_TABLE_RULE = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+\s*$", re.MULTILINE)
_MAX_TITLE = 120


def load_csv(path: Path, data: bytes, limits: ConversionLimits) -> LoadedDocument:
    """One section per row: ``column: value`` lines (headers from the first row).

    Raises:
        ConversionLimitError: More rows or cells than ``limits`` allow.
        LoaderError: Not text, or not CSV.
    """
    text = decode_text(path, data)
    csv.field_size_limit(MAX_CSV_FIELD)
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    sections = []
    cells = 0
    try:
        for number, row in enumerate(csv.DictReader(io.StringIO(text), dialect=dialect), 1):
            cells += len(row)
            _check_rows(number, cells, limits)
            lines = [f"{key}: {value}" for key, value in row.items() if key and value]
            if lines:
                sections.append(Section("\n".join(lines)))
    except csv.Error as exc:
        raise LoaderError(f"unreadable CSV: {exc}") from exc
    return LoadedDocument(title_from_filename(path), tuple(sections))


def _check_rows(rows: int, cells: int, limits: ConversionLimits) -> None:
    if rows > limits.rows:
        raise ConversionLimitError(
            f"more than {limits.rows:,} rows (limit rows={limits.rows})", "rows"
        )
    if cells > limits.cells:
        raise ConversionLimitError(
            f"more than {limits.cells:,} cells (limit cells={limits.cells})", "cells"
        )


def load_json(path: Path, data: bytes, limits: ConversionLimits) -> LoadedDocument:
    """Leaves as ``path.to.key: value`` lines; one section per element of a top array.

    Raises:
        ConversionLimitError: A top-level array of more than ``limits.rows`` elements.
        LoaderError: Not JSON, or nested too deeply.
    """
    try:
        value = json.loads(decode_text(path, data))
    except RecursionError as exc:
        raise LoaderError("JSON nested too deeply") from exc
    except ValueError as exc:
        raise LoaderError(f"invalid JSON: {exc}") from exc
    items = value if isinstance(value, list) and value else [value]
    if len(items) > limits.rows:
        raise ConversionLimitError(
            f"a JSON array of {len(items):,} elements (limit rows={limits.rows})", "rows"
        )
    try:
        sections = tuple(Section("\n".join(_json_lines(item, ""))) for item in items)
    except RecursionError as exc:
        raise LoaderError("JSON nested too deeply") from exc
    title = value.get("title") if isinstance(value, dict) else None
    if not isinstance(title, str) or not title.strip():
        title = title_from_filename(path)
    return LoadedDocument(title[:_MAX_TITLE], tuple(s for s in sections if s.text.strip()))


def load_office(path: Path, data: bytes, limits: ConversionLimits) -> LoadedDocument:
    """A DOCX, PPTX or XLSX file, once its ZIP package is known to be within ``limits``.

    Raises:
        MissingConverterError: The ``office`` extra is not installed.
        ConversionLimitError: The package would expand beyond the ``zip_*`` limits, or a
            workbook has more rows or cells than allowed.
        LoaderError: The file is corrupt or not of the format its extension claims.
    """
    kind = path.suffix.lower()
    if kind == ".xlsx":
        return _load_xlsx(path, data, limits)
    open_office_package(data, kind, limits)  # before importing a converter: refusals are fast
    converter = _office_converter(kind)
    from markitdown import StreamInfo

    try:
        result = converter.convert(io.BytesIO(data), StreamInfo(extension=kind, filename=path.name))
    except MemoryError:
        raise  # the converting process's limit (memory_mb), not a damaged file
    # each format's reader raises its own errors on damaged files (zip, XML, KeyError...)
    except Exception as exc:
        raise LoaderError(f"unreadable {kind} file (damaged, or not a {kind} document)") from exc
    markdown = _TABLE_RULE.sub("", result.text_content or "")
    sections = _office_sections(kind, markdown)
    heading = _HEADING.search(markdown)
    title = (result.title or (heading.group(1) if heading else "")).strip()
    return LoadedDocument(title[:_MAX_TITLE] or title_from_filename(path), sections)


def _load_xlsx(path: Path, data: bytes, limits: ConversionLimits) -> LoadedDocument:
    try:
        import openpyxl  # noqa: F401  (its date-format rules)
    except ImportError as exc:
        raise _missing_extra(".xlsx") from exc
    from agentic_retrieval.sources.local.spreadsheets import read_workbook

    # the reader streams (no recursion), so only the parts' prologs are checked
    sheets = read_workbook(open_office_package(data, ".xlsx", limits, nesting=False), limits)
    sections = tuple(Section(f"## {sheet.name}\n" + "\n".join(sheet.lines)) for sheet in sheets)
    title = sheets[0].name.strip() if sheets else ""
    return LoadedDocument(title[:_MAX_TITLE] or title_from_filename(path), sections)


def _office_converter(extension: str) -> Any:
    try:
        from markitdown.converters import DocxConverter, PptxConverter
    except ImportError as exc:
        raise _missing_extra(extension) from exc
    converters: dict[str, Callable[[], Any]] = {".docx": DocxConverter, ".pptx": PptxConverter}
    return converters[extension]()


def missing_converter(extension: str) -> MissingConverterError | None:
    """The error for a format whose extra is not installed, found without importing it.

    (The server converts in a child process; this lets it answer 415 before starting one.)
    """
    module = _CONVERTER_MODULES.get(extension)
    if module is not None and importlib.util.find_spec(module) is None:
        return _missing_extra(extension)
    return None


def _missing_extra(extension: str) -> MissingConverterError:
    return MissingConverterError(
        f"reading {extension} files needs the [{OFFICE_EXTRA}] extra: {install_hint(OFFICE_EXTRA)}"
    )


def _office_sections(extension: str, markdown: str) -> tuple[Section, ...]:
    if extension == ".pptx":
        parts = _SLIDE.split(markdown)
        # split() gives [before, number, text, number, text...]
        return tuple(
            Section(text.strip(), page=int(number))
            for number, text in zip(parts[1::2], parts[2::2], strict=True)
            if text.strip()
        )
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
