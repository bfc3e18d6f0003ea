"""Split text into overlapping chunks that keep paragraphs and sentences whole where they can.

The unit of packing is the sentence. A chunk is filled paragraph by paragraph; a paragraph
that does not fit is moved whole to the next chunk when the current one is already at least
half full, and otherwise split between sentences. A sentence longer than a whole chunk is split
between words (and a word longer than a chunk is cut). Each new chunk starts with the last
whole sentences of the previous one, up to ``overlap`` characters, so a fact that straddles a
boundary is found from either side (except where the overlap would split a paragraph that
fits in a chunk on its own: then the paragraph wins).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

DEFAULT_CHUNK_SIZE = 1200
DEFAULT_OVERLAP = 200
SPLIT_GROWTH_LIMIT = 2
"""A text is split ahead (:func:`split_ahead`) only when its chunks, overlaps included, are
at most this many times its length (the default settings make ~1.2 times)."""

_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_HEADING_MARKS = re.compile(r"^\s{0,3}#{1,6}\s+|\s+#+\s*$")
_SENTENCE_END = re.compile(r"(?:(?<=[.!?…])|(?<=[.!?…][\"')\]]))\s+")
_SPACES = re.compile(r"[ \t\f\v\r\u00a0]+")
_HEADING_LINE = re.compile(r"#{1,6}\s")
_STRUCTURE_LINE = re.compile(r"(?:[-*+•]|\d{1,3}[.)]|#{1,6})\s")


@dataclass(frozen=True, slots=True)
class SplitText:
    """A text's chunks, split ahead of time by :func:`chunk_text` with these settings.

    A conversion child splits the text it made, so the process that stores it (the server,
    answering queries meanwhile) does not spend its own CPU time on it.
    """

    size: int
    overlap: int
    chunks: tuple[str, ...]


def split_ahead(text: str, size: int, overlap: int) -> SplitText | None:
    """``text`` split by :func:`chunk_text`, or ``None`` past the bound.

    ``None`` when its chunks would be more than :data:`SPLIT_GROWTH_LIMIT` times its length
    (an overlap near the chunk size): whoever stores it splits it then.
    """
    chunks = chunk_text(text, size, overlap)
    if sum(map(len, chunks)) > SPLIT_GROWTH_LIMIT * len(text):
        return None
    return SplitText(size, overlap, tuple(chunks))


def chunks_of(text: str, size: int, overlap: int, split: SplitText | None = None) -> list[str]:
    """``chunk_text(text, size, overlap)``, taken from ``split`` when it was made so."""
    if split is not None and (split.size, split.overlap) == (size, overlap):
        return list(split.chunks)
    return chunk_text(text, size, overlap)


@dataclass(frozen=True, slots=True)
class _Sentence:
    text: str
    paragraph: int
    line: int = 0  # the line of its paragraph (tables and lists keep their lines)


def normalize_text(text: str) -> str:
    """Collapse runs of spaces, trim lines and join the lines of each paragraph.

    Paragraphs (blocks separated by a blank line) are kept apart by one blank line. A line
    break inside a paragraph is a wrapped line (a PDF's, a hard-wrapped text's) and becomes
    a space, except before a line that is structure, not prose: a table row (``| a | b |``),
    a list item (``-``, ``*``, ``+``, ``1.``, ``1)``) or a heading, and after a table row or a
    heading. A table keeps one row per line and a list one item per line, as their reader
    needs them.
    """
    paragraphs = []
    for block in _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n")):
        lines = [_SPACES.sub(" ", line).strip() for line in block.split("\n")]
        kept: list[list[str]] = []  # each output line as its parts (joining as we go is quadratic)
        for line in filter(None, lines):
            if kept and not _starts_a_line(line) and not _ends_a_line(kept[-1][0]):
                kept[-1].append(line)
            else:
                kept.append([line])
        if kept:
            paragraphs.append("\n".join(" ".join(parts) for parts in kept))
    return "\n\n".join(paragraphs)


def _starts_a_line(line: str) -> bool:
    """A table row, list item or heading: the line break before it is the text's structure."""
    return line.startswith("|") or _STRUCTURE_LINE.match(line) is not None


def _ends_a_line(line: str) -> bool:
    """A table row or heading: the line after it starts a line of its own."""
    return line.startswith("|") or _HEADING_LINE.match(line) is not None


def body_without_title(title: str | None, text: str) -> str:
    """``text`` without its first line when that line is the title (``# Title`` included).

    A title counts once whichever way a document comes in: a Markdown file opening with
    ``# Ferries`` and the record ``{"title": "Ferries", "text": ...}`` index the same title and
    the same body, so they rank the same. Text that is nothing but its title is kept whole.
    """
    if not title:
        return text
    start = len(text) - len(text.lstrip())
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    first = _HEADING_MARKS.sub("", text[start:end])
    if " ".join(first.split()).casefold() != " ".join(title.split()).casefold():
        return text
    rest = text[end:]
    return rest if rest.strip() else text


def split_sentences(paragraph: str) -> list[str]:
    """Split one paragraph after ``.``, ``!``, ``?`` (and closing quotes) followed by space."""
    return [s.strip() for s in _SENTENCE_END.split(paragraph) if s.strip()]


def chunk_text(
    text: str, size: int = DEFAULT_CHUNK_SIZE, overlap: int = DEFAULT_OVERLAP
) -> list[str]:
    """Split ``text`` into chunks of at most ``size`` characters.

    Args:
        text: Plain text; blank lines separate paragraphs.
        size: Maximum chunk length in characters.
        overlap: Maximum number of characters (whole sentences) repeated from the end of one
            chunk at the start of the next; 0 disables overlap.

    Returns:
        The chunks in document order; empty when ``text`` has no words.

    Raises:
        ValueError: When ``size`` is not positive or ``overlap`` is not below ``size``.

    """
    if size <= 0 or not 0 <= overlap < size:
        raise ValueError("chunk size must be positive and overlap in [0, size)")
    paragraphs = _PARAGRAPH_BREAK.split(normalize_text(text)) if text.strip() else []
    return _Packer(size, overlap).pack(paragraphs)


class _Packer:
    """Packs sentences into chunks, tracking the rendered length instead of re-rendering.

    Re-rendering the current chunk for every sentence made a file of tiny sentences cost
    (chunk size / sentence length) times its length: a minute for 4 MB of "a. a. a.".
    """

    def __init__(self, size: int, overlap: int) -> None:
        self.size = size
        self.overlap = overlap
        self.chunks: list[str] = []
        self.current: list[_Sentence] = []
        self.length = 0  # len(_render(self.current))
        self.fresh = 0  # sentences in ``current`` that are not overlap from the previous chunk

    def pack(self, paragraphs: list[str]) -> list[str]:
        for index, paragraph in enumerate(paragraphs):
            sentences = [
                _Sentence(piece, index, line_number)
                for line_number, line in enumerate(paragraph.split("\n"))
                for sentence in split_sentences(line)
                for piece in _split_long(sentence, self.size)
            ]
            paragraph_length = _rendered_length(sentences)
            if self._joined(sentences, paragraph_length) <= self.size:
                self.add(sentences)
                continue
            if self.fresh and self.length >= self.size // 2:
                self.close()
                if self._joined(sentences, paragraph_length) > self.size >= paragraph_length:
                    self._restart([], 0)  # a whole paragraph is worth more than the overlap
            for sentence in sentences:
                if self._joined([sentence], len(sentence.text)) > self.size:
                    self.close()
                self.add([sentence])
        if self.fresh:
            self.chunks.append(_render(self.current))
        return self.chunks

    def _joined(self, sentences: list[_Sentence], length: int) -> int:
        """``len(_render([*self.current, *sentences]))`` given ``length`` of ``sentences``."""
        if not self.current or not sentences:
            return self.length + length
        return self.length + _gap(self.current[-1], sentences[0]) + length

    def add(self, sentences: list[_Sentence]) -> None:
        for sentence in sentences:
            self.length = self._joined([sentence], len(sentence.text))
            self.current.append(sentence)
        self.fresh += len(sentences)

    def _restart(self, sentences: list[_Sentence], length: int) -> None:
        self.current, self.length = sentences, length

    def close(self) -> None:
        """Emit the current chunk (if it has new text) and seed the next with the overlap."""
        if not self.fresh:
            self._restart([], 0)
            return
        self.chunks.append(_render(self.current))
        carried: list[_Sentence] = []  # newest first
        carried_length = 0
        for sentence in reversed(self.current):
            gap = _gap(sentence, carried[-1]) if carried else 0
            length = len(sentence.text) + gap + carried_length
            if length > self.overlap:
                break
            carried.append(sentence)
            carried_length = length
        self._restart(carried[::-1], carried_length)
        self.fresh = 0


def _gap(a: _Sentence, b: _Sentence) -> int:
    """The separator's length between two sentences: a space or line break, or a blank line."""
    return 1 if a.paragraph == b.paragraph else 2


def _rendered_length(sentences: list[_Sentence]) -> int:
    gaps = sum(_gap(a, b) for a, b in itertools.pairwise(sentences))
    return sum(len(s.text) for s in sentences) + gaps


def _render(sentences: list[_Sentence]) -> str:
    parts: list[str] = []
    for i, sentence in enumerate(sentences):
        if i:
            previous = sentences[i - 1]
            if sentence.paragraph != previous.paragraph:
                parts.append("\n\n")
            else:
                parts.append(" " if sentence.line == previous.line else "\n")
        parts.append(sentence.text)
    return "".join(parts)


def _split_long(sentence: str, size: int) -> list[str]:
    if len(sentence) <= size:
        return [sentence]
    pieces: list[str] = []
    current = ""
    for word in sentence.split(" "):
        if len(word) > size:
            # cut by offsets: slicing the rest off again and again copied a long word
            # (a base64 blob, a URL list) once per piece
            if current:
                pieces.append(current)
                current = ""
            cut = len(word) - (len(word) % size or size)
            pieces.extend(word[i : i + size] for i in range(0, cut, size))
            word = word[cut:]
        candidate = f"{current} {word}" if current else word
        if len(candidate) > size:
            pieces.append(current)
            current = word
        else:
            current = candidate
    if current:
        pieces.append(current)
    return pieces
