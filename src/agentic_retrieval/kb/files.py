"""The files of a ``file`` knowledge source: upload, update, list, delete.

Each file is converted to text, chunked and indexed on its own (its chunks are replaced in
one transaction, found by their words as soon as it commits); where the source ranks hybrid,
its chunks get their vectors afterwards (:meth:`DocumentStore.embed_pending`: a server runs it
in the background, :mod:`agentic_retrieval.kb.background_embedding`).

A file is described as Azure describes it (``KnowledgeSourceFile``): ``fileId``,
``fileName`` (it may hold a path: ``notes/build26/features.md``), ``prefix`` (that path's
directory part, with a trailing ``/``), ``fileSizeBytes``, ``createdAt``,
``lastUpdatedAt``, ``metadata`` (returned, not searchable), ``parsingMode`` and
``extractionMode``. Uploading content identical to what a file already holds (same name and
metadata too) is skipped.

Permissions: a source whose ``ingestionPermissionOptions`` lists ``userIds`` and/or
``groupIds`` takes them with every upload (``["all"]``: everyone) and stores them as the
file's permissions; an upload without them is refused rather than stored for nobody, and
ids sent to a source that does not ingest them are refused rather than dropped.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from agentic_retrieval.errors import (
    ConversionInterruptedError,
    ConversionLimitError,
    InvalidRequestError,
    LoaderError,
    MissingConverterError,
    ResourceConflictError,
    ResourceNotFoundError,
    ServiceError,
    ServiceUnavailableError,
    TooLargeError,
    UnreadableFileError,
    UnsupportedFileError,
)
from agentic_retrieval.permissions import Permissions
from agentic_retrieval.sources.local.documents import DocumentStore, PreparedUnit
from agentic_retrieval.sources.local.formats import missing_converter
from agentic_retrieval.sources.local.loaders import SUPPORTED_EXTENSIONS, LoadedDocument, load_file

_PARSING_MODES = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".csv": "delimitedText",
    ".json": "json",
}
_INTERNAL = ("contentHash",)
MAX_FILE_NAME = 1024


@dataclass(frozen=True, slots=True)
class FileUpload:
    """One upload: the file's name (may hold a path), its bytes, metadata and permission ids."""

    file_name: str
    content: bytes
    metadata: Mapping[str, str]
    user_ids: Sequence[str] | None = None
    """``userIds`` sent with the file (``None``: not sent)."""
    group_ids: Sequence[str] | None = None
    """``groupIds`` sent with the file (``None``: not sent)."""


@dataclass(frozen=True, slots=True)
class FileOutcome:
    """What an upload did: the file's description and whether it was (re)indexed."""

    file: dict[str, Any]
    indexed: bool


class SourceFiles:
    """The files of one file knowledge source.

    Args:
        documents: The source's store.
        max_file_bytes: Largest file accepted.
        max_files: Most files the source holds.
        permission_options: The source's ``ingestionPermissionOptions`` (``userIds``,
            ``groupIds``): the permission ids every upload must carry.
        name: The source's name (in errors).
    """

    def __init__(
        self,
        documents: DocumentStore,
        *,
        max_file_bytes: int,
        max_files: int,
        permission_options: frozenset[str] = frozenset(),
        name: str = "",
    ) -> None:
        self.documents = documents
        self.name = name
        self.max_file_bytes = max_file_bytes
        self.max_files = max_files
        self.permission_options = permission_options

    def upload(self, upload: FileUpload, document: LoadedDocument | None = None) -> FileOutcome:
        """Add a new file.

        Args:
            upload: The file.
            document: Its text, converted already (the server converts in a child process);
                ``None``: converted here.

        Raises:
            InvalidRequestError: A bad file name or metadata.
            ResourceConflictError: A file of that name exists, or the source is full.
            UnsupportedFileError: A type this service cannot read (415; names the extra when
                one would).
            UnreadableFileError: A corrupt file, or one without text.
        """
        self.check(upload)
        document = document or convert(upload)  # the slow part, before writers are held up
        file_id = str(uuid.uuid4())
        prepared = self._prepare(file_id, upload, document)
        with self.documents.store.transaction():  # one writer: names stay unique
            existing = self._by_name(upload.file_name)
            if existing is not None:
                raise ResourceConflictError(
                    f"A file named '{upload.file_name}' already exists in this knowledge "
                    f"source (fileId {existing['fileId']}); replace it with PUT to its "
                    "files('<fileId>')."
                )
            if self.documents.count() >= self.max_files:
                raise ResourceConflictError(
                    f"This knowledge source holds {self.max_files} files, its capacity; delete "
                    "some first."
                )
            now = _now()
            return self._write(file_id, upload, document, prepared, created=now, updated=now)

    def update(
        self, file_id: str, upload: FileUpload, document: LoadedDocument | None = None
    ) -> FileOutcome:
        """Replace a file's content (and name and metadata).

        ``document`` is as for :meth:`upload`; identical content is skipped unconverted.

        Raises:
            ResourceNotFoundError: No file with that id.
            ResourceConflictError: Another file already has the new name.
            UnsupportedFileError, UnreadableFileError, InvalidRequestError: As for
                :meth:`upload`.
        """
        current = self._current(file_id)
        self.check(upload)
        if current.get("contentHash") == _digest(upload):
            return FileOutcome(public(current), indexed=False)
        document = document or convert(upload)
        prepared = self._prepare(file_id, upload, document)
        with self.documents.store.transaction():
            current = self._current(file_id)  # it may have gone while converting
            other = self._by_name(upload.file_name)
            if other is not None and other["fileId"] != file_id:
                raise ResourceConflictError(
                    f"Another file (fileId {other['fileId']}) is already named "
                    f"'{upload.file_name}'."
                )
            return self._write(
                file_id, upload, document, prepared, created=current["createdAt"], updated=_now()
            )

    def unchanged(self, file_id: str, upload: FileUpload) -> bool:
        """Whether ``upload`` is what the file already holds (an update would skip it).

        Raises:
            ResourceNotFoundError: No file with that id.
        """
        return bool(self._current(file_id).get("contentHash") == _digest(upload))

    def delete(self, file_id: str) -> bool:
        """Remove a file and its chunks; ``False`` when there was none."""
        return self.documents.delete(file_id)

    def get(self, file_id: str) -> dict[str, Any] | None:
        """A file's description."""
        found = self.documents.get(file_id)
        return public(found) if found is not None else None

    def all(self) -> list[dict[str, Any]]:
        """Every file's description, by file name."""
        files, after = [], None
        while True:
            batch = self.documents.page(after, 1000)
            files += [public(item) for _, item in batch]
            if len(batch) < 1000:
                break
            after = batch[-1][0]
        return sorted(files, key=lambda f: (f["fileName"], f["fileId"]))

    def check(self, upload: FileUpload) -> None:
        """Refuse a bad name, metadata, size, type or permission ids before converting.

        Also refuses any write (new file, update, identical re-upload) to a source whose
        vectors this server cannot make (:meth:`DocumentStore.write_refusal`).

        Raises:
            InvalidRequestError, TooLargeError, UnsupportedFileError: What is wrong.
            ResourceConflictError: The source holds vectors this server cannot make.
        """
        refusal = self.documents.write_refusal()
        if refusal is not None:
            raise ResourceConflictError(
                f"The knowledge source {self.name!r} takes no files from this server: "
                f"{refusal}. Nothing was written."
            )
        name = upload.file_name
        parts = PurePosixPath(name).parts
        if not name or len(name) > MAX_FILE_NAME or name.startswith("/") or ".." in parts:
            raise InvalidRequestError(
                f"fileName: {name!r} is not a valid file name (a relative path without '..', "
                f"at most {MAX_FILE_NAME} characters)"
            )
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in upload.metadata.items()):
            raise InvalidRequestError("metadata: a map of strings to strings")
        if len(upload.content) > self.max_file_bytes:
            raise TooLargeError(
                f"content: the file has {len(upload.content)} bytes; the limit is "
                f"{self.max_file_bytes}"
            )
        suffix = PurePosixPath(name).suffix.lower()
        if suffix not in SUPPORTED_EXTENSIONS:
            raise UnsupportedFileError(
                f"fileName: files of type {suffix or '(none)'!r} cannot be converted to text; "
                f"supported: {', '.join(sorted(SUPPORTED_EXTENSIONS))}"
            )
        missing = missing_converter(suffix)
        if missing is not None:
            raise UnsupportedFileError(str(missing))
        self.permissions(upload)

    def permissions(self, upload: FileUpload) -> Permissions | None:
        """The permissions an upload gives its file (``None``: the source takes none).

        Raises:
            InvalidRequestError: Ids the source does not ingest, none where it does, or
                malformed ids.
        """
        sent = {"userIds": upload.user_ids, "groupIds": upload.group_ids}
        extra = sorted(
            k for k, v in sent.items() if v is not None and k not in self.permission_options
        )
        if extra:
            raise InvalidRequestError(
                f"metadata.{extra[0]}: this knowledge source does not ingest {extra[0]} (its "
                "ingestionPermissionOptions do not list it); they would be dropped"
            )
        if not self.permission_options:
            return None
        if all(sent[k] is None for k in self.permission_options):
            wanted = " and/or ".join(sorted(self.permission_options))
            raise InvalidRequestError(
                f"metadata: this knowledge source ingests permissions: send {wanted} with the "
                'file (["all"] for everyone) in the multipart metadata part'
            )
        try:
            return Permissions.from_lists(upload.user_ids, upload.group_ids)
        except ValueError as exc:
            raise InvalidRequestError(f"metadata: {exc}") from exc

    def _current(self, file_id: str) -> dict[str, Any]:
        current = self.documents.get(file_id)
        if current is None:
            raise ResourceNotFoundError(f"No file with id '{file_id}' exists in this source.")
        return current

    def _by_name(self, name: str) -> dict[str, Any] | None:
        return next((f for f in self.all() if f["fileName"] == name), None)

    def _prepare(self, file_id: str, upload: FileUpload, document: LoadedDocument) -> PreparedUnit:
        """The file's chunks (no lock held; vectors come after the write, where it ranks hybrid)."""
        return self.documents.prepare(
            file_id,
            title=document.title,
            sections=document.sections,
            fields=_fields(file_id, upload, document),
        )

    def _write(
        self,
        file_id: str,
        upload: FileUpload,
        document: LoadedDocument,
        prepared: PreparedUnit,
        *,
        created: str,
        updated: str,
    ) -> FileOutcome:
        path = PurePosixPath(upload.file_name)
        prefix = f"{path.parent.as_posix()}/" if str(path.parent) != "." else ""
        described = {
            "fileId": file_id,
            "fileName": upload.file_name,
            "fileSizeBytes": len(upload.content),
            "createdAt": created,
            "lastUpdatedAt": updated,
            "errorMessage": None,
            "prefix": prefix,
            "metadata": dict(upload.metadata),
            "parsingMode": _PARSING_MODES.get(path.suffix.lower(), "default"),
            "extractionMode": "minimal",
            "contentHash": _digest(upload),
        }
        permissions = self.permissions(upload)
        if permissions is not None:
            described.update(permissions.to_wire())
        self.documents.put(
            file_id,
            stored=described,
            title=document.title,
            sections=document.sections,
            fields=_fields(file_id, upload, document),
            permissions=permissions,
            prepared=prepared,
        )
        return FileOutcome(public(described), indexed=True)


def _fields(file_id: str, upload: FileUpload, document: LoadedDocument) -> dict[str, Any]:
    """The filterable fields every chunk of the file shares."""
    return {"file_id": file_id, "file_name": upload.file_name, "title": document.title}


def convert(upload: FileUpload) -> LoadedDocument:
    """The file's text, by its extension.

    Raises:
        UnsupportedFileError: An optional converter is missing (the message names the extra).
        TooLargeError: The file crosses a conversion limit (the message names it).
        UnreadableFileError: A corrupt file, or one without any text.
    """
    try:
        document = load_file(Path(upload.file_name), upload.content)  # only its name is read
    except LoaderError as exc:
        raise conversion_error(upload.file_name, exc) from exc
    return converted(upload.file_name, document)


def converted(file_name: str, document: LoadedDocument) -> LoadedDocument:
    """``document``, once it has some text.

    Raises:
        UnreadableFileError: It has none.
    """
    if not any(section.text.strip() for section in document.sections):
        raise UnreadableFileError(f"'{file_name}' has no extractable text")
    return document


def conversion_error(file_name: str, exc: LoaderError) -> ServiceError:
    """What a failed conversion answers: 415, 413, 503 or 400.

    415: a missing extra; 413: a limit; 503: the conversion was killed from outside (retry).
    """
    if isinstance(exc, MissingConverterError):
        return UnsupportedFileError(str(exc))
    if isinstance(exc, ConversionInterruptedError):
        return ServiceUnavailableError(
            f"converting '{file_name}' was interrupted: {exc}; nothing is known against the "
            "file, retry the upload"
        )
    if isinstance(exc, ConversionLimitError):
        return TooLargeError(
            f"'{file_name}' cannot be converted: {exc}; this service's operator can raise "
            f"its conversion limit {exc.limit}"
        )
    return UnreadableFileError(f"could not read '{file_name}': {exc}")


def public(described: Mapping[str, Any]) -> dict[str, Any]:
    """A file's description as the API shows it (without internal fields)."""
    return {k: v for k, v in described.items() if k not in _INTERNAL}


def _digest(upload: FileUpload) -> str:
    digest = hashlib.sha256(upload.content)
    digest.update(upload.file_name.encode())
    digest.update(repr(sorted(upload.metadata.items())).encode())
    digest.update(repr((upload.user_ids, upload.group_ids)).encode())
    return digest.hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
