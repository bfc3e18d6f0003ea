"""ASGI middleware guarding the server: request ids, a body-size limit and an in-flight cap.

Both limits act before the application reads or parses anything, so an oversized body or a
burst of requests costs almost nothing to refuse.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentic_retrieval.server.errors import REQUEST_ID_HEADER, ApiError

_BODY_METHODS = {"POST", "PUT", "PATCH"}
UPLOAD_PATH = re.compile(r".*/(docs/index|docs/search\.index|files|files\('[^/]*'\)|files/[^/]+)\Z")
"""Document batches and file uploads: bodies up to ``max_upload_bytes``."""
_UNLIMITED_PATHS = {"/healthz"}


class GuardMiddleware:
    """Request ids, a 413 for oversized bodies and a 429 for too many requests in flight.

    Bodies over ``max_body_bytes`` are refused before they are parsed; requests beyond
    ``max_in_flight`` concurrent ones get a 429 with ``Retry-After``.

    Args:
        app: The wrapped ASGI application.
        max_body_bytes: Largest request body accepted.
        max_upload_bytes: Largest body of a document batch or file upload (:data:`UPLOAD_PATH`).
        max_in_flight: Most requests handled at once (``/healthz`` is not counted).
        retry_after_seconds: The ``Retry-After`` value of a 429.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_in_flight: int,
        retry_after_seconds: int,
        max_upload_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max(max_upload_bytes or 0, max_body_bytes)
        self.max_in_flight = max_in_flight
        self.retry_after_seconds = retry_after_seconds
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        send = _with_request_id(send, request_id)
        if scope["path"] in _UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            error = ApiError(
                429,
                f"More than {self.max_in_flight} requests are in flight; retry after "
                f"{self.retry_after_seconds} s.",
                headers={"Retry-After": str(self.retry_after_seconds)},
            )
            await _send_error(send, error)
            return
        self.in_flight += 1
        try:
            if scope["method"] in _BODY_METHODS:
                buffered = await self._buffered(scope, receive, send)
                if buffered is None:
                    return
                receive = buffered
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _buffered(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """Read the whole body (up to the limit) and return a receive that replays it."""
        limit = self.max_upload_bytes if UPLOAD_PATH.match(scope["path"]) else self.max_body_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _send_error(send, self._too_large(limit))
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _send_error(send, self._too_large(limit))
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return replay

    def _too_large(self, limit: int) -> ApiError:
        return ApiError(413, f"The request body is larger than the limit of {limit} bytes.")


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _with_request_id(send: Send, request_id: str) -> Send:
    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = list(message.get("headers", []))
            name = REQUEST_ID_HEADER.encode()
            if all(key.lower() != name for key, _ in headers):  # a 500 already carries it
                headers.append((name, request_id.encode()))
                message = {**message, "headers": headers}
        await send(message)

    return wrapped


async def _send_error(send: Send, error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
