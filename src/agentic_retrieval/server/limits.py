"""ASGI middleware guarding the server: keys first, bounded bodies, fair shares, hang-ups.

The order is what makes it cheap to abuse nobody but yourself:

1. a request without a valid key is answered 401 from its headers alone (its body is never
   read, the connection is closed), so unauthenticated clients hold nothing;
2. a request with a body is matched against the app's own route table from its headers: no
   route is a 404, a method the route does not take a 405, and a key the route refuses a
   401/403 (each route declares who may send it a body and how large, see
   :class:`~agentic_retrieval.server.auth.BodyAccess`), all before one byte of the body is
   read; only then is the body read, up to the route's limit;
3. two budgets bound what requests hold (:class:`RequestBudget`): bodies being received
   (``max_receiving``) and requests being processed (``max_in_flight``, bodies complete).
   A request takes a receiving slot before its body is read and gives it back once the body
   is complete, so a slow body never holds a processing slot. In each budget one caller (a
   key; without keys, a client address) holds at most ``caller_share`` of the slots, so
   slow or many requests from one key leave the rest to everyone else. Beyond either, a 429
   with ``Retry-After`` (before the body: the connection is closed);
4. a ``Content-Length`` over the limit is a 413 at once, and a body that does not arrive
   within ``body_timeout_seconds`` a 408 (both close the connection);
5. when the client disconnects, the request's task is cancelled, so an abandoned run stops
   instead of competing with live ones.

Header read time and size are bounded one layer down, in the HTTP protocol
(:mod:`agentic_retrieval.server.serving`), since no ASGI code runs before headers end.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from starlette.datastructures import Headers
from starlette.routing import Match, Router
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentic_retrieval.server.auth import (
    UNAUTHORIZED_MESSAGE,
    ApiKeys,
    BodyAccess,
    body_access_of,
    presented_key,
)
from agentic_retrieval.server.errors import REQUEST_ID_HEADER, ApiError
from agentic_retrieval.server.requests import path_name_error

_BODY_METHODS = {"POST", "PUT", "PATCH"}
_UNLIMITED_PATHS = {"/healthz"}
DEFAULT_CALLER_SHARE = 0.75
"""The fraction of each budget one caller may hold: a quarter is always left to the others."""


class Slots:
    """A budget of slots, each caller holding at most its share of them.

    Args:
        size: The slots.
        share: The fraction of them one caller may hold (at least one slot).
    """

    def __init__(self, size: int, share: float) -> None:
        self.size = size
        self.per_caller = max(1, math.ceil(size * share))
        self.used = 0
        self._held: dict[str, int] = {}

    def full_for(self, caller: str) -> str | None:
        """Why ``caller`` may not take a slot now (``"full"``, ``"share"``), or ``None``."""
        if self.used >= self.size:
            return "full"
        if self._held.get(caller, 0) >= self.per_caller:
            return "share"
        return None

    def take(self, caller: str) -> None:
        """Hold one slot for ``caller`` (after :meth:`full_for` said it may)."""
        self.used += 1
        self._held[caller] = self._held.get(caller, 0) + 1

    def give(self, caller: str) -> None:
        """Give back one of ``caller``'s slots."""
        self.used -= 1
        left = self._held[caller] - 1
        if left:
            self._held[caller] = left
        else:
            del self._held[caller]

    def callers_at_share(self) -> int:
        """How many callers hold their whole share now."""
        return sum(held >= self.per_caller for held in self._held.values())


class RequestBudget:
    """What requests may hold at once: bodies being received, and requests being processed.

    Shared by the guard (which takes and gives slots) and ``/healthz`` (which reports them).

    Args:
        max_in_flight: Requests processed at once (their bodies complete).
        max_receiving: Bodies being received at once.
        caller_share: The fraction of each budget one caller may hold.
    """

    def __init__(
        self,
        *,
        max_in_flight: int,
        max_receiving: int,
        caller_share: float = DEFAULT_CALLER_SHARE,
    ) -> None:
        self.processing = Slots(max_in_flight, caller_share)
        self.receiving = Slots(max_receiving, caller_share)
        self.refused = 0

    def report(self) -> tuple[bool, dict[str, Any]]:
        """Whether a budget is full (any new request would get a 429), and the figures."""
        saturated = any(slots.used >= slots.size for slots in (self.processing, self.receiving))
        return saturated, {
            "inFlight": self.processing.used,
            "maxInFlight": self.processing.size,
            "receivingBodies": self.receiving.used,
            "maxReceivingBodies": self.receiving.size,
            "callersAtShare": max(
                self.processing.callers_at_share(), self.receiving.callers_at_share()
            ),
            "refused": self.refused,
        }


class GuardMiddleware:
    """Keys, routes, body size and time, fair budgets and cancellation on disconnect.

    Args:
        app: The wrapped ASGI application.
        keys: The accepted keys; requests without a valid one get a 401 before anything is
            read (``/healthz`` is open). Roles (admin or query) are checked by the routes
            too.
        router: The app's router: its routes decide, from a request's headers, whether a
            body may be sent and how large (see
            :class:`~agentic_retrieval.server.auth.BodyAccess`).
        budget: The slots requests take (``/healthz`` is not counted).
        max_header_bytes: Largest request line plus headers (431 beyond).
        max_body_bytes: Largest request body accepted.
        max_upload_bytes: Largest body of a document batch or file upload.
        body_timeout_seconds: Longest time a request body may take to arrive.
        retry_after_seconds: The ``Retry-After`` value of a 429.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        keys: ApiKeys,
        router: Router,
        budget: RequestBudget,
        max_header_bytes: int,
        max_body_bytes: int,
        body_timeout_seconds: float,
        retry_after_seconds: int,
        max_upload_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.keys = keys
        self.router = router
        self.budget = budget
        self.max_header_bytes = max_header_bytes
        self.max_body_bytes = max_body_bytes
        self.max_upload_bytes = max(max_upload_bytes or 0, max_body_bytes)
        self.body_timeout_seconds = body_timeout_seconds
        self.retry_after_seconds = retry_after_seconds

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
        limit = self.max_body_bytes
        if scope["method"] in _BODY_METHODS:
            try:  # from the headers: the body is never read when it is refused
                access = self._body_access(scope, headers)
            except ApiError as refused:
                await _send_error(send, refused, close=True)
                return
            limit = self.max_upload_bytes if access.upload else self.max_body_bytes
        caller = self._caller(scope, headers)
        budget = self.budget
        receiving = scope["method"] in _BODY_METHODS and _announces_body(scope)
        refusal = self._refusal(caller, receiving)
        if refusal is not None:  # before the body: close, or the unread body would follow
            await _send_error(send, refusal, close=True)
            return
        if receiving:
            budget.receiving.take(caller)  # given back once the body is complete
            try:
                body = await self._read_body(scope, receive, send, limit)
            finally:
                budget.receiving.give(caller)
        else:
            body = await self._read_body(scope, receive, send, limit)
        if body is None:
            return
        refusal = self._refusal(caller, receiving=False)
        if refusal is not None:  # the slots filled while the body arrived
            await _send_error(send, refusal)
            return
        budget.processing.take(caller)
        released = False

        def release() -> None:
            # at the end of the response, not of the app: a client may send its next
            # request the moment it has read this response
            nonlocal released
            if not released:
                released = True
                budget.processing.give(caller)

        try:
            await _cancel_on_disconnect(self.app, scope, body, receive, send, release)
        finally:
            release()

    def _body_access(self, scope: Scope, headers: Headers) -> BodyAccess:
        """Who may send this request's body, from the route it resolves to.

        Raises:
            ApiError: 404 (no route), 405 (not this method), 400 (a name in the path too
                long to exist), 401/403 (not this key).
        """
        found = resolve_route(self.router, scope)
        if isinstance(found, ApiError):
            raise found
        access, params = found
        for parameter, value in params.items():  # as the app would: never echo a long name
            too_long = path_name_error(parameter, str(value))
            if too_long is not None:
                raise too_long
        access.check(self.keys, headers, params)
        return access

    def _caller(self, scope: Scope, headers: Headers) -> str:
        """Whose share a request counts against: its key, or without keys its address."""
        key = presented_key(headers) if self.keys.enabled else None
        if key is not None:  # (a digest: the budget never holds a key)
            return "key:" + hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
        client = scope.get("client")
        return f"client:{client[0] if client else ''}"

    def _refusal(self, caller: str, receiving: bool) -> ApiError | None:
        """The 429 for a request from ``caller`` now, or ``None`` when it may go on."""
        budgets = [("in flight", self.budget.processing)]
        if receiving:
            budgets.append(("being received", self.budget.receiving))
        for what, slots in budgets:
            why = slots.full_for(caller)
            if why is None:
                continue
            self.budget.refused += 1
            things = "requests" if what == "in flight" else "request bodies"
            retry = f"retry after {self.retry_after_seconds} s."
            if why == "full":
                message = f"More than {slots.size} {things} are {what}; {retry}"
            else:
                who = "key" if caller.startswith("key:") else "client"
                message = (
                    f"This {who} already has {slots.per_caller} {things} {what}, its share "
                    f"of this server's {slots.size}; {retry}"
                )
            return ApiError(429, message, headers={"Retry-After": str(self.retry_after_seconds)})
        return None

    async def _read_body(
        self, scope: Scope, receive: Receive, send: Send, limit: int
    ) -> bytes | None:
        """The whole body, or ``None`` after answering 413/408 (or when the client left)."""
        if scope["method"] not in _BODY_METHODS:
            return b""
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


def resolve_route(router: Router, scope: Scope) -> tuple[BodyAccess, Mapping[str, Any]] | ApiError:
    """The body access of the route ``scope`` goes to, and its path parameters.

    Matches as the router itself does (a path that only differs by a trailing slash goes to
    the route the router will redirect to), or gives the router's own answer: 404 for no
    route, 405 (with ``Allow``) for a path whose routes take other methods.
    """
    path = scope["path"]
    candidates = [path]
    if router.redirect_slashes and path != "/":
        candidates.append(path.rstrip("/") if path.endswith("/") else path + "/")
    for candidate in candidates:
        allowed: set[str] = set()
        for route in router.routes:
            match, child = route.matches({**scope, "path": candidate})
            if match is Match.FULL:
                return body_access_of(child.get("endpoint")), child.get("path_params", {})
            if match is Match.PARTIAL:
                allowed |= set(getattr(route, "methods", None) or ())
        if allowed:
            return ApiError(
                405, "Method Not Allowed", headers={"Allow": ", ".join(sorted(allowed))}
            )
    return ApiError(404, "Not Found")


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


def _header_bytes(scope: Scope) -> int:
    """The size of the request line and headers, as they were on the wire (about)."""
    line = len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + 16
    return line + sum(len(name) + len(value) + 4 for name, value in scope.get("headers", []))


def _announces_body(scope: Scope) -> bool:
    """Whether the request says a body follows (a length over 0, or chunks)."""
    length = _content_length(scope)
    if length is not None:
        return length > 0
    return any(name == b"transfer-encoding" for name, _ in scope.get("headers", []))


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
