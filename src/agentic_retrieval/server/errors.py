"""Errors in Azure's shape: ``{"error": {"code", "message", "details"}}``, for every status.

Real bugs become a 500 carrying only a request id (the traceback goes to the log, never to
the client).
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

from agentic_retrieval.errors import InvalidRequestError, UnknownKnowledgeSourceError

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
    415: "UnsupportedMediaType",
    429: "TooManyRequests",
    500: "InternalServerError",
}


class ApiError(Exception):
    """An error answered with its status code and the Azure error body.

    Args:
        status: The HTTP status code.
        message: What went wrong, naming the field or resource.
        code: The error code (default: one per status, e.g. ``InvalidRequest``).
        details: Nested errors (``{"code", "message"}`` dicts).
        headers: Extra response headers (e.g. ``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        details: list[dict[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code or _CODES.get(status, "Error")
        self.details = details or []
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The Azure error body."""
        return error_body(self.code, self.message, self.details)

    def response(self) -> JSONResponse:
        """The JSON response carrying this error."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict:
    """``{"error": {"code", "message", "details"}}``."""
    return {"error": {"code": code, "message": message, "details": details or []}}


def from_request_error(exc: InvalidRequestError) -> ApiError:
    """Map the library's request errors to 400 or 404."""
    if isinstance(exc, UnknownKnowledgeSourceError):
        return ApiError(404, str(exc), code="KnowledgeSourceNotFound")
    return ApiError(400, str(exc))


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error, including FastAPI's own, in the Azure shape."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(InvalidRequestError)
    async def _invalid(request: Request, exc: InvalidRequestError) -> JSONResponse:
        return from_request_error(exc).response()

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
        request_id = getattr(request.state, "request_id", None) or uuid.uuid4().hex
        logger.error("unhandled error in request %s", request_id, exc_info=exc)
        error = ApiError(
            500,
            f"An internal error occurred; quote request id {request_id} when reporting it.",
            details=[{"code": "RequestId", "message": request_id}],
            headers={REQUEST_ID_HEADER: request_id},
        )
        return error.response()
