"""ASGI middleware guarding the server: keys first, bounded bodies, an in-flight cap, hang-ups.

The order is what makes it cheap to abuse nobody but yourself:

1. a request without a valid key is answered 401 from its headers alone (its body is never
   read, the connection is closed), so unauthenticated clients hold nothing;
2. a body sent to a route its key may not use is refused from the headers too: a query key
   gets its 403 for an upload, a document batch or a definition before one byte of the body
   is read (only retrieve, MCP and ``docs/search`` take a query key's body);
3. a request takes one of ``max_in_flight`` slots (a 429 with ``Retry-After`` beyond that)
   *before* its body is read, so the bodies being received are bounded too: at most
   ``max_in_flight`` of them, each within its limit;
4. a ``Content-Length`` over the limit is a 413 at once, and a body that does not arrive
   within ``body_timeout_seconds`` a 408 (both close the connection);
5. when the client disconnects, the request's task is cancelled, so an abandoned run stops
   instead of competing with live ones.

Header read time and size are bounded one layer down, in the HTTP protocol
(:mod:`agentic_retrieval.server.serving`), since no ASGI code runs before headers end.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Callable
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentic_retrieval.server.auth import UNAUTHORIZED_MESSAGE, ApiKeys, require_role
from agentic_retrieval.server.errors import REQUEST_ID_HEADER, ApiError

_BODY_METHODS = {"POST", "PUT", "PATCH"}
_UNLIMITED_PATHS = {"/healthz"}
UPLOAD_PATH = re.compile(r".*/(docs/index|docs/search\.index|files|files\('[^/]*'\)|files/[^/]+)\Z")
"""Document batches and file uploads: bodies up to ``max_upload_bytes``."""
MANAGED_PATH = re.compile(r"/(indexes|knowledgesources|knowledgebases|agents)(/|\(|\Z)")
"""The management API's resources: a body sent here needs an admin key, unless it is a query."""
QUERY_PATH = re.compile(r".*/(retrieve|mcp/?|docs/search|docs/search\.post\.search)\Z")
"""The routes under :data:`MANAGED_PATH` whose body a query key may send."""


class GuardMiddleware:
    """Keys, body size and time, the in-flight cap and cancellation on disconnect.

    Args:
        app: The wrapped ASGI application.
        keys: The accepted keys; requests without a valid one get a 401 before anything is
            read (``/healthz`` is open). Roles (admin or query) are checked by the routes.
        max_header_bytes: Largest request line plus headers (431 beyond).
        max_body_bytes: Largest request body accepted.
        max_upload_bytes: Largest body of a document batch or file upload (:data:`UPLOAD_PATH`).
        body_timeout_seconds: Longest time a request body may take to arrive.
        max_in_flight: Most requests handled at once, their bodies being received included
            (``/healthz`` is not counted).
        retry_after_seconds: The ``Retry-After`` value of a 429.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: ApiKeys,
        max_header_bytes: int,
        max_body_bytes: int,
        body_timeout_seconds: float,
        max_in_flight: int,
        retry_after_seconds: int,
        max_upload_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.keys = keys
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max(max_upload_bytes or 0, max_body_bytes)
        self.body_timeout_seconds = body_timeout_seconds
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
        if _header_bytes(scope) > self.max_header_bytes:
            # (headers that never complete are bounded in the HTTP protocol, serving.py)
            message = f"The request headers are larger than {self.max_header_bytes} bytes."
            await _send_error(send, ApiError(431, message), close=True)
            return
        headers = Headers(scope=scope)
        if self.keys.role_of(headers) is None:
            await _send_error(send, ApiError(401, UNAUTHORIZED_MESSAGE), close=True)
            return
        if _needs_admin(scope):
            try:
                require_role(self.keys, headers, "admin")
            except ApiError as refused:  # before the body: it is never read
                await _send_error(send, refused, close=True)
                return
        if self.in_flight >= self.max_in_flight:
            # refused before the body is read: close, or the unread body would follow
            await _send_error(send, self._busy(), close=True)
            return
        self.in_flight += 1  # the body is received in this slot: received bodies are bounded
        released = False

        def release() -> None:
            # at the end of the response, not of the app: a client may send its next
            # request the moment it has read this response
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1

        try:
            body = await self._read_body(scope, receive, send)
            if body is not None:
                await _cancel_on_disconnect(self.app, scope, body, receive, send, release)
        finally:
            release()

    async def _read_body(self, scope: Scope, receive: Receive, send: Send) -> bytes | None:
        """The whole body, or ``None`` after answering 413/408 (or when the client left)."""
        if scope["method"] not in _BODY_METHODS:
            return b""
        limit = self.max_upload_bytes if UPLOAD_PATH.match(scope["path"]) else self.max_body_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _send_error(send, self._too_large(limit), close=True)
            return None
        try:
            async with asyncio.timeout(self.body_timeout_seconds):
                return await self._receive_body(receive, send, limit)
        except TimeoutError:
            error = ApiError(
                408,
                f"The request body did not arrive within {self.body_timeout_seconds:g} s.",
            )
            await _send_error(send, error, close=True)
            return None

    async def _receive_body(self, receive: Receive, send: Send, limit: int) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _send_error(send, self._too_large(limit), close=True)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _too_large(self, limit: int) -> ApiError:
        return ApiError(413, f"The request body is larger than the limit of {limit} bytes.")

    def _busy(self) -> ApiError:
        return ApiError(
            429,
            f"More than {self.max_in_flight} requests are in flight; retry after "
            f"{self.retry_after_seconds} s.",
            headers={"Retry-After": str(self.retry_after_seconds)},
        )


async def _cancel_on_disconnect(
    app: ASGIApp,
    scope: Scope,
    body: bytes,
    receive: Receive,
    send: Send,
    on_response_sent: Callable[[], None],
) -> None:
    """Run ``app`` with ``body`` replayed; cancel it if the client disconnects first.

    After the body, this function alone reads the connection: the app's further
    ``receive()`` calls (Starlette's streaming responses listen for ``http.disconnect``) wait
    for the hang-up this function observes. A "disconnect" after the response was sent is
    the server's own end of the exchange, not a hang-up: the app finishes undisturbed.
    """
    disconnected = asyncio.Event()
    replayed = False
    responded = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def tracked_send(message: Message) -> None:
        nonlocal responded
        await send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            responded = True
            on_response_sent()

    run = asyncio.ensure_future(app(scope, replay, tracked_send))
    watch = asyncio.ensure_future(_wait_for_disconnect(receive))
    try:
        await asyncio.wait({run, watch}, return_when=asyncio.FIRST_COMPLETED)
        if run.done() or responded:
            await run
            return
        # the client hung up: stop the work it was waiting for
        disconnected.set()
        run.cancel()
        try:
            await run
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # this task itself is being cancelled (server shutdown)
    finally:
        watch.cancel()
        run.cancel()


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _needs_admin(scope: Scope) -> bool:
    """Whether the request carries a body only an admin key may send (from its path)."""
    path = scope["path"]
    return (
        scope["method"] in _BODY_METHODS
        and MANAGED_PATH.match(path) is not None
        and QUERY_PATH.match(path) is None
    )


def _header_bytes(scope: Scope) -> int:
    """The size of the request line and headers, as they were on the wire (about)."""
    line = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + 16
    return line + sum(len(name) + len(value) + 4 for name, value in scope.get("headers", []))


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


async def _send_error(send: Send, error: ApiError, *, close: bool = False) -> None:
    """Send ``error``; ``close`` ends the connection (its unread body must not be parsed)."""
    body = json.dumps(error.body()).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
