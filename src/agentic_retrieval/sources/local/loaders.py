"""Read files into titled, paged plain text.

TXT, Markdown, HTML and PDF are read here; CSV, JSON and Office documents (DOCX, PPTX, XLSX;
extra ``office``) in :mod:`.formats`. PDF is read with ``pypdf`` page by page (what
``langchain-community``'s ``PyPDFLoader`` wraps), so every chunk keeps its page number for
citations. Each loader returns a :class:`LoadedDocument`; a file that cannot be read raises
:class:`LoaderError` with a reason the ingest report shows to the user, and one that would
cost more than its :class:`ConversionLimits` allow a :class:`ConversionLimitError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from agentic_retrieval.errors import ConversionLimitError, LoaderError
from agentic_retrieval.sources.local.chunking import SplitText
from agentic_retrieval.sources.local.conversion_limits import ConversionLimits

SUPPORTED_EXTENSIONS = frozenset(
    {
        ".txt",
        ".md",
        ".markdown",
        ".html",
        ".htm",
        ".pdf",
        ".csv",
        ".json",
        ".docx",
        ".pptx",
        ".xlsx",
    }
)
"""Extensions :func:`load_file` reads (DOCX, PPTX and XLSX need the ``office`` extra)."""
_MAX_TITLE = 120
_BINARY_SNIFF = 8192


@dataclass(frozen=True, slots=True)
class Section:
    """A run of text and the 1-based page it comes from (``None`` for unpaged formats).

    ``split``: the text's chunks, where they were split ahead (by a conversion child).
    """

    text: str
    page: int | None = None
    split: SplitText | None = None


@dataclass(frozen=True, slots=True)
class LoadedDocument:
    """The text of one file, with the title chosen for its chunks."""

    title: str
    sections: tuple[Section, ...]


def load_file(path: Path, data: bytes, limits: ConversionLimits | None = None) -> LoadedDocument:
    """Turn the bytes of ``path`` into a document, choosing the loader by extension.

    Args:
        path: The file's path (for the extension and the fallback title).
        data: The file's content, already read (so the caller hashes what it indexes).
        limits: What converting it may cost (default: :class:`ConversionLimits` defaults).
            Only the content limits apply here; time and memory bound the child process
            of :func:`~agentic_retrieval.sources.local.conversion.convert_in_child`.

    Returns:
        The document; its sections may be empty when the file has no text.

    Raises:
        ConversionLimitError: The file crosses a limit (it is refused, never truncated).
        LoaderError: Unsupported extension, binary content, or a corrupt file
            (:class:`~agentic_retrieval.errors.MissingConverterError` when an extra is needed).

    """
    limits = limits or ConversionLimits()
    loader = _LOADERS.get(path.suffix.lower()) or _more_formats().get(path.suffix.lower())
    if loader is None:
        raise LoaderError(f"unsupported file type {path.suffix or '(none)'!r}")
    document = loader(path, data, limits)
    chars = sum(len(section.text) for section in document.sections)
    if chars > limits.text_chars:
        raise ConversionLimitError(
            f"{chars:,} characters of text (limit text_chars={limits.text_chars})", "text_chars"
        )
    return document


def title_from_filename(path: Path) -> str:
    """``Northwind_Health-plus.pdf`` -> ``Northwind Health plus``."""
    return re.sub(r"[_\-\s]+", " ", path.stem).strip() or path.name


def decode_text(path: Path, data: bytes) -> str:
    """Text from bytes: UTF-8 (with or without BOM), else Windows-1252; binary is an error."""
    if b"\x00" in data[:_BINARY_SNIFF]:
        raise LoaderError("binary content (NUL bytes) in a text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Legacy 8-bit text is common; cp1252 fails only on a few unassigned bytes.
        try:
            return data.decode("cp1252")
        except UnicodeDecodeError as exc:
            raise LoaderError(f"not UTF-8 or Windows-1252 text: {exc}") from exc


def _first_line_title(text: str) -> str | None:
    for line in text.splitlines():
        line = " ".join(line.split())
        if line:
            looks_like_heading = len(line) <= _MAX_TITLE and not line.endswith((".", ",", ";"))
            return line if looks_like_heading else None
    return None


def _load_txt(path: Path, data: bytes, _: ConversionLimits) -> LoadedDocument:
    text = decode_text(path, data)
    title = _first_line_title(text) or title_from_filename(path)
    return LoadedDocument(title, (Section(text),) if text.strip() else ())


_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _load_markdown(path: Path, data: bytes, _: ConversionLimits) -> LoadedDocument:
    text = decode_text(path, data)
    heading = _MD_HEADING.search(text)
    title = heading.group(1).strip() if heading else title_from_filename(path)
    return LoadedDocument(title[:_MAX_TITLE], (Section(text),) if text.strip() else ())


class _HtmlText(HTMLParser):
    _SKIP = frozenset({"script", "style", "noscript", "template", "svg"})
    _BLOCK = frozenset(
        {
            "p",
            "div",
            "br",
            "li",
            "ul",
            "ol",
            "tr",
            "table",
            "section",
            "article",
            "header",
            "footer",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "pre",
            "blockquote",
            "hr",
            "main",
        }
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip_depth = 0
        self.stack: list[str] = []
        self.title = ""
        self.h1 = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self.skip_depth += 1
        if tag in self._BLOCK:
            self.parts.append("\n\n")
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self.skip_depth:
            self.skip_depth -= 1
        if tag in self._BLOCK:
            self.parts.append("\n\n")
        if tag in self.stack:
            while self.stack and self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        current = self.stack[-1] if self.stack else ""
        if current == "title":
            self.title += data
            return
        if self.skip_depth:
            return
        if "h1" in self.stack:
            self.h1 += data
        self.parts.append(data)


def _load_html(path: Path, data: bytes, _: ConversionLimits) -> LoadedDocument:
    parser = _HtmlText()
    parser.feed(decode_text(path, data))
    parser.close()
    text = "".join(parser.parts)
    title = " ".join(parser.title.split()) or " ".join(parser.h1.split())
    title = title[:_MAX_TITLE] or title_from_filename(path)
    return LoadedDocument(title, (Section(text),) if text.strip() else ())


def _load_pdf(path: Path, data: bytes, limits: ConversionLimits) -> LoadedDocument:
    import io

    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    sections: list[Section] = []
    chars = 0
    try:
        reader = PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
        for number, page in enumerate([] if encrypted else reader.pages, start=1):
            text = page.extract_text() or ""
            chars += len(text)
            if chars > limits.text_chars:
                break  # refused below, before reading further pages
            if text.strip():
                sections.append(Section(text, page=number))
        meta_title = "" if encrypted else (reader.metadata.title if reader.metadata else "")
    # pypdf raises its own errors but also bare KeyError/TypeError/... on damaged files.
    except (
        PyPdfError,
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
        AssertionError,
        RecursionError,
        ZeroDivisionError,
        OSError,
    ) as exc:
        # pypdf's own wording names its internals; the cause stays chained for debugging
        raise LoaderError("unreadable PDF (damaged, truncated or not a PDF)") from exc
    if encrypted:
        raise LoaderError("encrypted PDF")
    if chars > limits.text_chars:
        raise ConversionLimitError(
            f"more than {limits.text_chars:,} characters of text (limit text_chars="
            f"{limits.text_chars})",
            "text_chars",
        )
    title = " ".join(str(meta_title or "").split())[:_MAX_TITLE] or title_from_filename(path)
    return LoadedDocument(title, tuple(sections))


_Loader = Callable[[Path, bytes, ConversionLimits], LoadedDocument]
_LOADERS: dict[str, _Loader] = {
    ".txt": _load_txt,
    ".md": _load_markdown,
    ".markdown": _load_markdown,
    ".html": _load_html,
    ".htm": _load_html,
    ".pdf": _load_pdf,
}


def _more_formats() -> dict[str, _Loader]:
    from agentic_retrieval.sources.local import formats

    return {
        ".csv": formats.load_csv,
        ".json": formats.load_json,
        ".docx": formats.load_office,
        ".pptx": formats.load_office,
        ".xlsx": formats.load_office,
    }
