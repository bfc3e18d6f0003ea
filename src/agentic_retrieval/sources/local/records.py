"""Records: documents that are data (JSONL, CSV, dicts, LangChain ``Document``s), not files.

A record has an id, an optional title, a text, and any other fields, which become
filterable metadata on every chunk of the record. Field names are chosen with
:class:`RecordFields` (defaults: id ``_id`` then ``id``, title ``title``, text ``text`` then
``content``), so a BEIR ``corpus.jsonl`` reads with no options.

A record's permissions (who may see it) come from the fields named by
``RecordFields.user_ids`` and ``RecordFields.group_ids`` when set: a list of ids, or one
string of ids separated by ``;`` or ``,`` (a CSV cell); ``all`` makes the record public. Those
fields never become metadata (a filter cannot read or test them).

LangChain ``Document``s (from any ``langchain_community`` document loader) become records
too: the text is ``page_content``, the metadata are the document's metadata, and the id is
``Document.id``, else an id field of the metadata, else the loader's ``source`` (plus its
``row`` / ``page`` / ``seq_num`` / ``start_index`` when present, so each row or page of one
file is its own record).
"""

from __future__ import annotations

import codecs
import csv
import io
import itertools
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from langchain_core.documents import Document

# defined in errors.py; importable from here
from agentic_retrieval.errors import RecordError as RecordError
from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.local.ingest import RESERVED_METADATA
from agentic_retrieval.sources.local.store import json_default

RECORD_FORMATS = (".jsonl", ".ndjson", ".json", ".csv", ".tsv")
RESERVED_RECORD_FIELDS = RESERVED_METADATA
"""Metadata names the store sets itself on record chunks (``record_id``, ``title``...)."""
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_LOADER_POSITION_KEYS = ("row", "page", "seq_num", "start_index")
_ID_SEPARATORS = re.compile(r"[;,]")
MAX_NAMED_FIELDS = 20
"""Field names a record error lists (a wide CSV has hundreds)."""
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?\Z")


@dataclass(frozen=True, slots=True)
class RecordFields:
    """Which fields hold a record's id, title and text (the first one present wins)."""

    id: tuple[str, ...] = ("_id", "id")
    title: tuple[str, ...] = ("title",)
    text: tuple[str, ...] = ("text", "content")
    user_ids: str | None = None
    """The field holding the user ids allowed to see a record (none: not read)."""
    group_ids: str | None = None
    """The field holding the group ids allowed to see a record (none: not read)."""

    @classmethod
    def of(
        cls,
        id_field: str | None = None,
        title_field: str | None = None,
        text_field: str | None = None,
        *,
        user_ids_field: str | None = None,
        group_ids_field: str | None = None,
    ) -> RecordFields:
        """Defaults, with each given field name replacing its default candidates."""
        default = cls()
        return cls(
            id=(id_field,) if id_field else default.id,
            title=(title_field,) if title_field else default.title,
            text=(text_field,) if text_field else default.text,
            user_ids=user_ids_field or None,
            group_ids=group_ids_field or None,
        )

    @property
    def names(self) -> frozenset[str]:
        """Every candidate field name (none of them becomes metadata)."""
        permission_fields = (f for f in (self.user_ids, self.group_ids) if f)
        return frozenset((*self.id, *self.title, *self.text, *permission_fields))

    def permissions(self, item: Mapping[str, Any]) -> Permissions | None:
        """The permissions ``item`` carries in the permission fields (``None``: none given).

        Raises:
            RecordError: A permission field that is not a list of ids or a string of them.
        """
        users = _ids(item.get(self.user_ids)) if self.user_ids else None
        groups = _ids(item.get(self.group_ids)) if self.group_ids else None
        if not users and not groups:
            return None
        try:
            return Permissions.from_lists(users, groups)
        except ValueError as exc:
            raise RecordError(f"permissions: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Record:
    """One document to index: its id, title, text and filterable metadata."""

    id: str
    title: str
    text: str
    metadata: Mapping[str, Any]
    permissions: Permissions | None = None
    """Who may see it (``None``: the ingestion's default, or what it had)."""

    def canonical(self) -> str:
        """A stable serialisation (what the content hash is computed over)."""
        return json.dumps(
            {"id": self.id, "title": self.title, "text": self.text, "metadata": self.metadata},
            sort_keys=True,
            ensure_ascii=False,
            default=json_default,
        )


@dataclass(frozen=True, slots=True)
class RecordFailure:
    """A record that could not be read: where (``FILE:LINE`` or the id) and why."""

    where: str
    reason: str


def to_record(item: Mapping[str, Any] | Document, fields: RecordFields) -> Record:
    """Turn a dict or a LangChain ``Document`` into a :class:`Record`.

    Raises:
        RecordError: No id, no text, or a metadata field name that cannot be filtered on.
    """
    if isinstance(item, Document):
        return _from_document(item, fields)
    if not isinstance(item, Mapping):
        raise RecordError(f"a record must be an object, not {type(item).__name__}")
    identifier = _first(item, fields.id)
    if identifier is None:
        raise RecordError(f"no id field ({' or '.join(fields.id)}); {_fields_found(item)}")
    title = _first(item, fields.title)
    text = _first(item, fields.text)
    metadata = {k: v for k, v in item.items() if k not in fields.names}
    record = _record(str(identifier), title, text, metadata, fields)
    return _with_permissions(record, item, fields)


def _fields_found(item: Mapping[str, Any]) -> str:
    """The record's field names (the first 20): what a misspelt field option should have been."""
    names = [str(name) for name in itertools.islice(item, MAX_NAMED_FIELDS)]
    more = len(item) - len(names)
    if not names:
        return "the record has no fields"
    return f"the record's fields are: {', '.join(names)}" + (f" (and {more} more)" if more else "")


def _from_document(document: Document, fields: RecordFields) -> Record:
    metadata = dict(document.metadata)
    identifier: Any = document.id or _first(metadata, fields.id)
    if identifier is None and metadata.get("source") is not None:
        position = [f"{k}={metadata[k]}" for k in _LOADER_POSITION_KEYS if k in metadata]
        identifier = "#".join([str(metadata["source"]), *position])
    if identifier is None:
        raise RecordError(
            "a Document needs an id: set Document.id, or an 'id' (or 'source') metadata field"
        )
    title = _first(metadata, fields.title)
    permission_source = metadata
    metadata = {k: v for k, v in metadata.items() if k not in fields.names}
    record = _record(str(identifier), title, document.page_content, metadata, fields)
    return _with_permissions(record, permission_source, fields)


def _with_permissions(record: Record, item: Mapping[str, Any], fields: RecordFields) -> Record:
    try:
        permissions = fields.permissions(item)
    except RecordError as exc:
        raise RecordError(f"record {record.id!r}: {exc}") from exc
    if permissions is None:
        return record
    return Record(record.id, record.title, record.text, record.metadata, permissions)


def _ids(value: Any) -> list[str]:
    """A permission field's ids: a list, or one string separated by ``;`` or ``,``."""
    if value is None or value == "":
        return []
    if isinstance(value, str | int):
        return [part.strip() for part in _ID_SEPARATORS.split(str(value)) if part.strip()]
    if isinstance(value, list | tuple):
        return [str(v) if isinstance(v, int) else v for v in value]
    raise RecordError(f"permissions: expected a list of ids or a string, not {value!r:.60}")


def _record(
    identifier: str, title: Any, text: Any, metadata: dict[str, Any], fields: RecordFields
) -> Record:
    if not identifier.strip():
        raise RecordError("empty id")
    title_text = "" if title is None else str(title).strip()
    body = "" if text is None else str(text)
    if not body.strip() and not title_text:
        raise RecordError(f"record {identifier!r} has no text ({' or '.join(fields.text)})")
    bad = [name for name in metadata if not isinstance(name, str) or not _FIELD_NAME.match(name)]
    if bad:
        raise RecordError(
            f"record {identifier!r}: field names {bad} cannot be filtered on (use letters, "
            "digits and _, not starting with a digit)"
        )
    reserved = sorted(RESERVED_RECORD_FIELDS.intersection(metadata))
    if reserved:
        raise RecordError(
            f"record {identifier!r}: fields {reserved} are set by the store; choose them "
            "as the title/text field or rename them"
        )
    return Record(identifier, title_text, body if body.strip() else title_text, metadata)


def _first(item: Mapping[str, Any], names: Iterable[str]) -> Any:
    for name in names:
        value = item.get(name)
        if value is not None and value != "":
            return value
    return None


def read_records(
    path: str | Path, fields: RecordFields
) -> Iterator[tuple[str, Record | RecordFailure]]:
    """Read a JSONL (``.jsonl``/``.ndjson``), JSON array, CSV or TSV file of records.

    The file is read one record at a time (see :class:`RecordsFile`).

    Yields:
        ``(where, record or failure)`` pairs, where ``where`` is ``FILE:LINE`` (the row or
        element number for JSON arrays): a malformed line is a failure, not the end of the run.

    Raises:
        RecordError: The file is missing, unreadable, of an unknown format, or (JSON array,
            CSV header) unreadable as a whole.
    """
    yield from RecordsFile(path, fields)


class RecordsFile:
    """A records file read lazily, one record at a time, and how far it has been read.

    Memory does not grow with the file: a JSONL line, a CSV row or a JSON array's element is
    parsed, yielded and dropped before the next is read (``bytes_read`` and ``size`` drive a
    progress bar). A line that is not valid JSON or not UTF-8 is a failure of that line; in a
    JSON array, an element that cannot be parsed is a failure that ends the reading (what
    follows it cannot be located), and the elements before it stay read.

    Raises:
        RecordError: (On creation) the file is missing or of an unknown format; (while
            iterating) unreadable, not an array (JSON) or without a header row (CSV).
    """

    def __init__(self, path: str | Path, fields: RecordFields) -> None:
        self.path = Path(path)
        self.fields = fields
        suffix = self.path.suffix.lower()
        if suffix not in RECORD_FORMATS:
            raise RecordError(
                f"{self.path}: unknown records format {suffix or '(none)'!r} "
                f"(use {', '.join(RECORD_FORMATS)})"
            )
        if not self.path.is_file():
            reason = "not a regular file" if self.path.exists() else "no such records file"
            raise RecordError(f"{self.path}: {reason}")
        self.suffix = suffix
        self.size = self.path.stat().st_size
        """The file's size in bytes when it was opened."""
        self._handle: io.BufferedReader | None = None

    @property
    def bytes_read(self) -> int:
        """Bytes read from the file so far (ahead of the last record by at most a buffer)."""
        handle = self._handle
        if handle is None or handle.closed:
            return self.size if handle is not None else 0
        return min(handle.raw.tell(), self.size)  # the buffer's reads, not the parser's

    def __iter__(self) -> Iterator[tuple[str, Record | RecordFailure]]:
        source = self.path
        try:
            with source.open("rb") as handle:
                self._handle = handle
                if self.suffix in (".csv", ".tsv"):
                    text = io.TextIOWrapper(handle, encoding="utf-8-sig", newline="")
                    delimiter = "\t" if self.suffix == ".tsv" else ","
                    yield from _parsed(source, _read_table(source, text, delimiter), self.fields)
                elif self.suffix == ".json":
                    text = io.TextIOWrapper(handle, encoding="utf-8-sig")
                    yield from _parsed(source, _read_array(source, text), self.fields)
                else:
                    yield from _parsed(source, _read_lines(handle), self.fields)
        except (OSError, UnicodeDecodeError) as exc:
            raise RecordError(f"{source}: cannot read ({exc})") from exc


def _parsed(
    source: Path, rows: Iterator[tuple[int, Any]], fields: RecordFields
) -> Iterator[tuple[str, Record | RecordFailure]]:
    for number, row in rows:
        where = f"{source.name}:{number}"
        if isinstance(row, RecordFailure):
            yield where, RecordFailure(where, row.reason)
            continue
        try:
            yield where, to_record(row, fields)
        except RecordError as exc:
            yield where, RecordFailure(where, str(exc))


def _read_lines(handle: BinaryIO) -> Iterator[tuple[int, Any]]:
    for number, raw in enumerate(handle, start=1):
        if number == 1 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield number, RecordFailure("", f"not UTF-8 ({exc})")
            continue
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            yield number, RecordFailure("", f"invalid JSON ({exc})")


MAX_JSON_ELEMENT_CHARS = 256 * 1024 * 1024
"""The largest element of a JSON array records file (characters): an element is parsed
whole, so this bounds what one element can hold in memory."""
_JSON_READ_CHARS = 1 << 16
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


def _read_array(source: Path, handle: io.TextIOBase) -> Iterator[tuple[int, Any]]:
    """The elements of a JSON array, parsed one at a time from a window of the file."""
    text = _JsonWindow(handle)
    if text.next_char() != "[":
        raise RecordError(f"{source}: a .json records file must hold an array of objects")
    count = 0
    if text.peek_char() == "]":
        text.next_char()
    else:
        for number in itertools.count(1):
            count = number
            try:
                yield number, text.value()
            except ValueError as exc:
                reason = f"invalid JSON ({exc}); the elements after it are not read"
                yield number, RecordFailure("", reason)
                return
            delimiter = text.next_char()
            if delimiter == "]":
                break
            if delimiter != ",":
                found = repr(delimiter) if delimiter else "the end of the file"
                reason = f"invalid JSON (expected ',' or ']' after element {number}, found {found})"
                yield number + 1, RecordFailure("", reason)
                return
    if text.next_char():
        yield count + 1, RecordFailure("", "invalid JSON (data after the array's end)")


class _JsonWindow:
    """A sliding window over a text file for parsing a JSON array's elements one by one."""

    def __init__(self, handle: io.TextIOBase) -> None:
        self.handle = handle
        self.buffer = ""
        self.position = 0
        self.eof = False

    def _read(self) -> bool:
        """Read more (as much again as is buffered: re-parsing a long element stays linear)."""
        if self.eof:
            return False
        if self.position > len(self.buffer) // 2:  # drop what has been parsed
            self.buffer, self.position = self.buffer[self.position :], 0
        pending = len(self.buffer) - self.position
        if pending > MAX_JSON_ELEMENT_CHARS:
            raise ValueError(f"an element longer than {MAX_JSON_ELEMENT_CHARS:,} characters")
        more = self.handle.read(max(_JSON_READ_CHARS, pending))
        self.eof = not more
        self.buffer += more
        return bool(more)

    def _skip_space(self) -> None:
        while True:
            match = _JSON_SPACE.match(self.buffer, self.position)
            self.position = match.end() if match else self.position
            if self.position < len(self.buffer) or not self._read():
                return

    def peek_char(self) -> str:
        """The next character that is not white space (``""`` at the end of the file)."""
        self._skip_space()
        return self.buffer[self.position : self.position + 1]

    def next_char(self) -> str:
        """Consume and return :meth:`peek_char`."""
        char = self.peek_char()
        self.position += len(char)
        return char

    def value(self) -> Any:
        """Parse the next value (raises ``ValueError`` when it is not valid JSON)."""
        self._skip_space()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buffer, self.position)
            except ValueError:
                if self._read():  # perhaps cut by the window: try again with more
                    continue
                raise
            if end == len(self.buffer) and self._read():  # a number may go on
                continue
            self.position = end
            return value


_DECODER = json.JSONDecoder()


def _read_table(source: Path, handle: io.TextIOBase, delimiter: str) -> Iterator[tuple[int, Any]]:
    """The rows of a CSV/TSV file as dicts; a row the csv module refuses fails alone.

    A cell holds at most ``csv.field_size_limit()`` characters (131,072 unless the
    application changes it): a longer one fails its row.
    """
    reader = csv.DictReader(handle, delimiter=delimiter)
    try:
        header = reader.fieldnames
    except csv.Error as exc:
        raise RecordError(f"{source}: unreadable header row ({exc})") from exc
    if not header:
        raise RecordError(f"{source}: no header row")
    lines = reader.reader  # counts the lines a failing row consumed too (DictReader does not)
    while True:
        before = lines.line_num
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            if lines.line_num == before:  # nothing consumed: no way past it
                raise RecordError(f"{source}:{before + 1}: unreadable ({exc})") from exc
            yield lines.line_num, RecordFailure("", f"unreadable row ({exc})")
            continue
        if None in row:
            yield reader.line_num, RecordFailure("", "more cells than header columns")
            continue
        yield reader.line_num, {k: typed_cell(v) for k, v in row.items() if v not in ("", None)}


def typed_cell(raw: str) -> Any:
    """A CSV cell as a value: numbers and ``true``/``false`` are typed, text stays text.

    Numbers with leading zeros (``007``, zip codes) stay text.
    """
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if _NUMBER.match(raw.strip()):
        is_integer = "." not in lowered and "e" not in lowered
        return int(raw.strip()) if is_integer else float(raw)
    return raw
