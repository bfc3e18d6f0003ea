"""Errors in Azure's shape: ``{"error": {"code", "message", "details"}}``, for every status.

The library's errors map to statuses here and nowhere else (:func:`api_error_for`): the kinds
a caller can fix become a 4xx with their message; every other kind (configuration, a store
that cannot be opened...) is the service's problem and, like a real bug, becomes a 500
carrying only a request id (the traceback goes to the log, never to the client).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentic_retrieval.errors import (
    AgenticRetrievalError,
    DatabaseUnavailableError,
    IdentityRequiredError,
    InvalidDefinitionError,
    InvalidRequestError,
    InvalidTokenError,
    KnowledgeSourceFailedError,
    ModelRequiredError,
    PermissionsNotEnforceableError,
    PreconditionFailedError,
    QuotaExceededError,
    ResourceConflictError,
    ResourceNotFoundError,
    ServiceUnavailableError,
    TooLargeError,
    UnknownKnowledgeSourceError,
    UnreadableFileError,
    UnsupportedFileError,
)
from agentic_retrieval.wire.models import ErrorDetail, ErrorResponse

logger = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-ms-request-id"

_CODES = {
    400: "InvalidRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    408: "RequestTimeout",
    413: "RequestEntityTooLarge",
    424: "FailedDependency",
    415: "UnsupportedMediaType",
    429: "TooManyRequests",
    500: "InternalServerError",
    503: "ServiceUnavailable",
}


CLIENT_ERRORS: tuple[tuple[type[AgenticRetrievalError], int, str], ...] = (
    (IdentityRequiredError, 401, "Unauthorized"),
    (InvalidTokenError, 401, "Unauthorized"),
    # enforced permissions on an index without any (a document read; retrieves record it)
    (PermissionsNotEnforceableError, 403, "Forbidden"),
    (UnknownKnowledgeSourceError, 404, "KnowledgeSourceNotFound"),
    (InvalidDefinitionError, 400, "InvalidRequestParameter"),
    (ResourceNotFoundError, 404, "ResourceNotFound"),
    (ResourceConflictError, 409, "Conflict"),
    (PreconditionFailedError, 412, "PreconditionFailed"),
    (QuotaExceededError, 429, "QuotaExceeded"),
    (TooLargeError, 413, "RequestEntityTooLarge"),
    (UnsupportedFileError, 415, "UnsupportedMediaType"),
    (UnreadableFileError, 400, "UnreadableFile"),
    (InvalidRequestError, 400, "InvalidRequest"),
)
"""The library errors a caller can fix: (kind, HTTP status, error code), most specific first.
Any other :class:`AgenticRetrievalError` answers 500."""


class ApiError(Exception):
    """An error answered with its status code and the Azure error body.

    Not an :class:`~agentic_retrieval.errors.AgenticRetrievalError`: it is how the server
    reports a failure (library errors become one through :func:`api_error_for`), raised and
    answered inside the server only.

    Args:
        status: The HTTP status code.
        message: What went wrong, naming the field or resource.
        code: The error code (default: one per status, e.g. ``InvalidRequest``).
        details: Nested errors (``{"code", "message"}`` dicts).
        headers: Extra response headers (e.g. ``Retry-After``).
        target: What the error is about (e.g. the knowledge source that failed).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        target: str | None = None,
    ) -> None:
        super().__init__(message)
        self.target = target
        self.status = status
        self.message = message
        self.code = code or _CODES.get(status, "Error")
        self.details = details or []
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The Azure error body."""
        return error_body(self.code, self.message, self.details, target=self.target)

    def response(self) -> JSONResponse:
        """The JSON response carrying this error."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(
    code: str,
    message: str,
    details: list[dict[str, Any]] | None = None,
    *,
    target: str | None = None,
) -> dict[str, Any]:
    """``{"error": {"code", "message", "target"?, "details"}}`` (:class:`ErrorResponse`)."""
    detail = ErrorDetail(
        code=code,
        message=message,
        target=target,
        details=[ErrorDetail.model_validate(d) for d in details or []],
    )
    return ErrorResponse(error=detail).to_wire()


def api_error_for(exc: BaseException) -> ApiError | None:
    """The answer to a library error that is not the service's fault, else ``None``.

    The caller's mistakes are 4xx with their message. A ``failOnError`` source that failed
    is the failure of a dependency the caller chose to depend on: 424 Failed Dependency with
    the source as ``target`` and its own error in ``details``. Not 502/504: azure-core's
    retry policy retries those (up to 10 times by default), re-running the whole retrieval
    for a failure the caller asked to see at once.
    """
    if isinstance(exc, ModelRequiredError):
        return ApiError(400, model_required_message(exc))
    if isinstance(exc, KnowledgeSourceFailedError):
        detail = exc.detail()
        return ApiError(
            424,
            detail["message"],
            code=detail["code"],
            target=detail["target"],
            details=detail["details"],
        )
    if isinstance(exc, DatabaseUnavailableError):  # serve --store: it comes back by itself
        return ApiError(
            503,
            f"The service's database is unavailable; retry shortly. {exc.reason}",
            code="ServiceUnavailable",
            headers={"Retry-After": "5"},
        )
    if isinstance(exc, ServiceUnavailableError):
        return ApiError(
            503,
            str(exc),
            code="ServiceUnavailable",
            headers={"Retry-After": str(exc.retry_after)},
        )
    for kind, status, code in CLIENT_ERRORS:
        if isinstance(exc, kind):
            return ApiError(status, str(exc), code=code)
    return None


def model_required_message(exc: ModelRequiredError) -> str:
    """A chosen effort or output mode needs a chat model, said in the request's field names."""
    field, unset_means = (
        ("retrievalReasoningEffort", "the model-free tier runs")
        if exc.setting == "effort"
        else ("outputMode", "the ranked passages are returned")
    )
    value = f'{{"kind": "{exc.value}"}}' if exc.setting == "effort" else f'"{exc.value}"'
    if exc.from_request:
        what, fix = f"'{field}' {value}", f"omit '{field}' ({unset_means})"
    else:
        other = '{"kind": "minimal"}' if exc.setting == "effort" else '"extractiveData"'
        what = f"This knowledge base's default '{field}' {value}"
        fix = f"send '{field}': {other}"
    return (
        f"{what} needs a chat model for {exc.role}, and this service has none configured: "
        f"{fix}, or start the service with {exc.env_var} set."
    )


def internal_error(request_id: str) -> ApiError:
    """The 500 answer: a request id to quote, nothing of the exception itself."""
    return ApiError(
        500,
        f"An internal error occurred; quote request id {request_id} when reporting it.",
        details=[{"code": "RequestId", "message": request_id}],
        headers={REQUEST_ID_HEADER: request_id},
    )


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error, including FastAPI's own, in the Azure shape."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(AgenticRetrievalError)
    async def _library(request: Request, exc: AgenticRetrievalError) -> JSONResponse:
        error = api_error_for(exc)
        return error.response() if error is not None else _internal(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("body", "query"))
        return ApiError(400, f"{where or 'request'}: {first.get('msg', 'invalid')}").response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        return ApiError(exc.status_code, message, headers=exc.headers).response()

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        return _internal(request, exc)


def _internal(request: Request, exc: BaseException) -> JSONResponse:
    request_id = getattr(request.state, "request_id", None) or uuid.uuid4().hex
    logger.error("unhandled error in request %s", request_id, exc_info=exc)
    return internal_error(request_id).response()
