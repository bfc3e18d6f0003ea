"""``/knowledgesources/{name}/files``: the files of a ``file`` knowledge source.

Upload (POST) as ``multipart/form-data`` with the parts ``metadata`` (JSON:
``{"fileName", "metadata"}``, plus ``userIds`` / ``groupIds`` for a source whose
``ingestionPermissionOptions`` list them) and ``content`` (the bytes), as in the 2026-10-01
GA, or as the
preview's raw ``application/octet-stream`` body named by ``Content-Disposition: attachment;
filename="notes/a.md"``. Update is a PUT of the same multipart body to ``files('{fileId}')``;
list takes ``prefix`` (a directory-like prefix of the file name), ``search`` (a prefix of the
name after the last ``/``), ``pageSize`` and ``$skipToken``. Each upload is converted and
indexed before the response, so it is retrievable as soon as the 201 arrives.

The conversion runs in a child process of the server's conversion pool
(:mod:`~agentic_retrieval.server.conversions`), bounded in time and memory: a file past a
limit is a 413 naming it, a full pool a 429, and a client that hangs up kills its child.
"""

from __future__ import annotations

import contextlib
import json
from email.message import EmailMessage
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile

from agentic_retrieval.errors import (
    AgenticRetrievalError,
    InvalidRequestError,
    LoaderError,
    ResourceNotFoundError,
    StoreNotFoundError,
    StoreUnavailableError,
)
from agentic_retrieval.kb.definitions import KnowledgeSourceDefinition
from agentic_retrieval.kb.files import (
    FileOutcome,
    FileUpload,
    SourceFiles,
    conversion_error,
    converted,
)
from agentic_retrieval.server.auth import UPLOAD_BODY
from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.server.management.common import (
    Management,
    add_routes,
    check_request,
    in_store_thread,
    in_thread,
    list_body,
    not_found,
    page,
    store_is_gone,
)
from agentic_retrieval.sources.local.loaders import LoadedDocument


def add_file_routes(app: FastAPI, management: Management) -> None:
    """Register the file routes."""

    async def upload(name: str, request: Request) -> JSONResponse:
        check_request(request, management.keys, "admin")
        files = _files(management, name)
        received = await read_upload(request)
        document = await _convert(management, name, files, received)

        def add(upload: FileUpload) -> FileOutcome:
            return files.upload(upload, document)

        outcome = await in_store_thread(
            management, "knowledgeSource", name, _ingest, management, name, add, received
        )
        _embed(management, name)
        _synchronize_graph(management, name)
        return JSONResponse(outcome.file, status_code=201)

    async def update(name: str, file_id: str, request: Request) -> JSONResponse:
        check_request(request, management.keys, "admin")
        files = _files(management, name)
        received = await read_upload(request)
        document = None  # identical content is not converted again
        unchanged = await in_store_thread(
            management, "knowledgeSource", name, files.unchanged, file_id, received
        )
        if not unchanged:
            document = await _convert(management, name, files, received)

        def replace(upload: FileUpload) -> FileOutcome:
            return files.update(file_id, upload, document)

        outcome = await in_store_thread(
            management, "knowledgeSource", name, _ingest, management, name, replace, received
        )
        if outcome.indexed:
            _embed(management, name)
            _synchronize_graph(management, name)
        return JSONResponse(outcome.file)

    async def list_files(name: str, request: Request) -> Any:
        check_request(request, management.keys, "admin")
        files = _files(management, name)
        prefix = request.query_params.get("prefix") or ""
        search = request.query_params.get("search") or ""
        chosen = [
            (f"{f['fileName']}\x00{f['fileId']}", f)
            for f in await in_store_thread(management, "knowledgeSource", name, files.all)
            if f["fileName"].startswith(prefix)
            and f["fileName"].rpartition("/")[2].startswith(search)
        ]
        values, next_link = page(request, chosen, by_name=False)
        return list_body(values, next_link)

    async def get(name: str, file_id: str, request: Request) -> JSONResponse:
        check_request(request, management.keys, "admin")
        found = await in_store_thread(
            management, "knowledgeSource", name, _files(management, name).get, file_id
        )
        if found is None:
            raise _no_file(name, file_id)
        return JSONResponse(found)

    async def delete(name: str, file_id: str, request: Request) -> Response:
        check_request(request, management.keys, "admin")
        deleted = await in_store_thread(
            management, "knowledgeSource", name, _files(management, name).delete, file_id
        )
        if not deleted:
            raise _no_file(name, file_id)
        _synchronize_graph(management, name)
        return Response(status_code=204)

    add_routes(app, "/knowledgesources/{name}/files", upload, ["POST"], UPLOAD_BODY)
    add_routes(app, "/knowledgesources/{name}/files", list_files, ["GET"])
    add_routes(app, "/knowledgesources/{name}/files/{file_id}", get, ["GET"])
    add_routes(app, "/knowledgesources/{name}/files/{file_id}", update, ["PUT"], UPLOAD_BODY)
    add_routes(app, "/knowledgesources/{name}/files/{file_id}", delete, ["DELETE"])


async def read_upload(request: Request) -> FileUpload:
    """The file in a multipart or raw octet-stream request.

    Raises:
        ApiError: 415 for another content type, 400 for a malformed body.
    """
    content_type = (request.headers.get("content-type") or "").lower()
    if content_type.startswith("multipart/form-data"):
        return await _multipart(request)
    if content_type.startswith("application/octet-stream"):
        name = _disposition_filename(request.headers.get("content-disposition"))
        if not name:
            raise ApiError(
                400,
                "Content-Disposition: an octet-stream upload needs "
                "'attachment; filename=\"<name>\"'.",
            )
        return FileUpload(name, await request.body(), {})
    raise ApiError(
        415,
        "Send the file as multipart/form-data (parts 'metadata' and 'content') or as "
        "application/octet-stream with a Content-Disposition filename.",
    )


async def _multipart(request: Request) -> FileUpload:
    form = await request.form()
    content = form.get("content")
    if content is None:
        raise ApiError(400, "content: the multipart body needs a 'content' part.")
    data = await content.read() if isinstance(content, UploadFile) else content.encode()
    raw = form.get("metadata")
    text = (await raw.read()).decode() if isinstance(raw, UploadFile) else (raw or "{}")
    try:
        metadata = json.loads(text)
    except ValueError as exc:
        raise ApiError(400, f"metadata: not valid JSON ({exc}).") from exc
    if not isinstance(metadata, dict):
        raise ApiError(400, "metadata: expected a JSON object {fileName, metadata}.")
    name = metadata.get("fileName") or (
        content.filename if isinstance(content, UploadFile) else None
    )
    if not isinstance(name, str) or not name:
        raise ApiError(400, "metadata.fileName: the file needs a name.")
    return FileUpload(
        name,
        data,
        metadata.get("metadata") or {},
        user_ids=_id_list(metadata, "userIds"),
        group_ids=_id_list(metadata, "groupIds"),
    )


def _id_list(metadata: dict[str, Any], name: str) -> list[str] | None:
    """``userIds`` / ``groupIds`` of the metadata part: a list of strings, or absent."""
    value = metadata.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(400, f"metadata.{name}: expected a list of id strings.")
    return value


def _embed(management: Management, name: str) -> None:
    """Give the source's new chunks their vectors, in the background (answered already)."""
    if management.embedder is not None:
        management.embedder.notify(name)


def _synchronize_graph(management: Management, name: str) -> None:
    """Bring the source's entity graph (if it has one) up to date, in the background."""
    if management.graphs is not None:
        management.graphs.schedule(name)


def _no_file(source: str, file_id: str) -> ResourceNotFoundError:
    return ResourceNotFoundError(
        f"No file with id '{file_id}' exists in the knowledge source '{source}'."
    )


def _disposition_filename(header: str | None) -> str | None:
    if not header:
        return None
    message = EmailMessage()
    message["content-disposition"] = header
    return message.get_filename()


def _files(management: Management, name: str) -> SourceFiles:
    service, catalog = management.require_service()
    stored = service.get("knowledgeSource", name)
    if stored is None:
        raise not_found("knowledge source", name)
    try:
        documents = catalog.file_documents(name)
    except (StoreUnavailableError, StoreNotFoundError) as exc:
        if store_is_gone(management, "knowledgeSource", name, exc):  # deleted meanwhile
            raise not_found("knowledge source", name) from None
        raise
    if documents is None:
        if service.get("knowledgeSource", name) is None:  # deleted meanwhile
            raise not_found("knowledge source", name)
        raise InvalidRequestError(
            f"The knowledge source '{name}' is of kind {stored.body.get('kind')!r}; files "
            "belong to knowledge sources of kind 'file'."
        )
    definition = KnowledgeSourceDefinition.model_validate(stored.body)
    options = definition.file_parameters.permission_options if definition.file_parameters else None
    return SourceFiles(
        documents,
        max_file_bytes=management.max_file_bytes,
        max_files=management.max_files,
        permission_options=options or frozenset(),
        name=name,
    )


async def _convert(
    management: Management, name: str, files: SourceFiles, upload: FileUpload
) -> LoadedDocument:
    """The upload's text, converted in a child process of the conversion pool.

    Raises:
        ApiError: 429 when the pool is full.
        ServiceError: As :meth:`SourceFiles.upload` (a failure is recorded in the source's
            ingestion history, as one the store refuses is).
    """
    try:
        files.check(upload)  # a bad name, type or size is refused before anything runs
        try:
            # split in the child too: storing a large file is mostly splitting it, and this
            # process answers queries meanwhile
            chunking = (files.documents.chunk_size, files.documents.overlap)
            document = await management.conversions.convert(
                upload.file_name, upload.content, chunking
            )
        except LoaderError as exc:
            raise conversion_error(upload.file_name, exc) from exc
        return converted(upload.file_name, document)
    except AgenticRetrievalError as exc:
        await in_thread(_record_failure, management, name, upload, exc)
        raise


def _record_failure(
    management: Management, name: str, upload: FileUpload, exc: AgenticRetrievalError
) -> None:
    def fail(_: FileUpload) -> FileOutcome:
        raise exc

    with contextlib.suppress(AgenticRetrievalError):
        _ingest(management, name, fail, upload)


def _ingest(management: Management, name: str, action: Any, upload: FileUpload) -> FileOutcome:
    """Run one upload as an ingestion run of the source (counted in its status)."""
    service, _ = management.require_service()
    stored = service.get("knowledgeSource", name)
    if stored is None or stored.store is None:
        raise not_found("knowledge source", name)
    with service.ingestion_run(stored.store) as run:
        try:
            outcome: FileOutcome = action(upload)
        except AgenticRetrievalError as exc:
            run.fail(upload.file_name, str(exc), 400)
            raise
        if outcome.indexed:
            run.processed += 1
        else:
            run.skipped += 1
    return outcome
