"""Errors of the OpenAI-compatible API, in OpenAI's shape.

That is ``{"error": {"message", "type", "param", "code"}}``. The routes under ``/v1`` answer
their own errors this way (:class:`OpenAIError`). Everything answered before or around them
(a missing key and the body limits in the server's guard, an unknown path, a wrong method) is
written in Azure's shape by the rest of the server; :class:`OpenAIErrorShape` rewrites those
for ``/v1`` paths, so an OpenAI client reads every error the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentic_retrieval.server.errors import ApiError

PREFIX = "/v1/"

_TYPES = {
    401: "invalid_request_error",
    403: "permission_error",
    408: "timeout_error",
    424: "upstream_error",
    429: "requests",
}
"""OpenAI's error ``type`` by status (``invalid_request_error`` for other 4xx)."""

_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
"""The ``code`` of the server guard's refusals (a key it does not know, too many requests)."""

NO_RETRY = {"x-should-retry": "false"}
"""OpenAI's clients retry 408 and 5xx unless told not to: a run that used up its
``maxRuntimeInSeconds``, or hit a bug, would only do so again."""


class OpenAIError(Exception):
    """An error answered in OpenAI's shape.

    Args:
        status: The HTTP status code.
        message: What went wrong, naming the field or model.
        code: A machine-readable code (``model_not_found``, ``invalid_api_key``...).
        param: The request field at fault, if one is.
        headers: Extra response headers.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = dict(headers or {})

    @classmethod
    def from_api_error(cls, error: ApiError, *, param: str | None = None) -> OpenAIError:
        """The same error (status, message, headers) in OpenAI's terms."""
        return cls(
            error.status,
            error.message,
            code=_CODES.get(error.status) if error.status in (401, 429) else snake(error.code),
            param=param,
            headers=error.headers,
        )

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return openai_error_body(self.status, self.message, code=self.code, param=self.param)

    def response(self) -> JSONResponse:
        """The JSON response carrying this error."""
        headers = {**self.headers, **(NO_RETRY if self.status == 408 else {})}
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def openai_error_body(
    status: int, message: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """OpenAI's error body for ``status``."""
    kind = _TYPES.get(status) or ("server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def snake(code: str | None) -> str | None:
    """``KnowledgeBaseNotFound`` -> ``knowledge_base_not_found`` (OpenAI's codes are snake)."""
    if not code:
        return None
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", code).lower()


class OpenAIErrorShape:
    """Rewrite Azure-shaped error responses under ``/v1`` into OpenAI's shape.

    Only error responses (status 400 and up) with a JSON body are read; a body already in
    OpenAI's shape (it has a ``type``) and every other response pass through untouched, and
    streams are never buffered.

    Args:
        app: The wrapped ASGI application.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(PREFIX):
            await self.app(scope, receive, send)
            return
        held: Message | None = None
        parts: list[bytes] = []

        async def rewriting_send(message: Message) -> None:
            nonlocal held
            if message["type"] == "http.response.start":
                if message["status"] >= 400 and _is_json(message):
                    held = message
                    return
            elif message["type"] == "http.response.body" and held is not None:
                parts.append(message.get("body", b""))
                if message.get("more_body", False):
                    return
                start, body = _rewritten(held, b"".join(parts))
                held = None
                await send(start)
                await send({"type": "http.response.body", "body": body})
                return
            await send(message)

        await self.app(scope, receive, rewriting_send)


def _is_json(start: Message) -> bool:
    content_type = Headers(raw=start.get("headers", [])).get("content-type", "")
    return content_type.startswith("application/json")


def _rewritten(start: Message, body: bytes) -> tuple[Message, bytes]:
    """The response start and body in OpenAI's shape (as they were if not Azure's)."""
    try:
        payload = json.loads(body)
    except ValueError:
        return start, body
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict) or "type" in error:
        return start, body
    status = int(start["status"])
    code = _CODES.get(status) or snake(error.get("code"))
    new = json.dumps(openai_error_body(status, str(error.get("message") or ""), code=code)).encode()
    headers = [
        (name, value)
        for name, value in start.get("headers", [])
        if name.lower() != b"content-length"
    ]
    headers.append((b"content-length", str(len(new)).encode()))
    if status >= 500:  # a bug: retrying would only hit it again
        headers.append((b"x-should-retry", b"false"))
    return {**start, "headers": headers}, new
