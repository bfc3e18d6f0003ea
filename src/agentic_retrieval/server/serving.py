"""Run the app under uvicorn with bounded request headers: time and size.

No ASGI code runs until a request's headers are complete, so a client that opens connections
and sends its headers a byte at a time (or never) is invisible to middleware. uvicorn bounds
neither the time headers take nor, with httptools, their size; :func:`bounded_protocol`
adds both to uvicorn's own HTTP protocol class:

- the headers of each request must arrive within ``header_timeout_seconds`` of the
  connection opening or of the request's first byte; otherwise the client gets a 408 (or,
  when it sent nothing at all, the connection is just closed, like an idle keep-alive);
- they may not exceed ``max_header_bytes`` (431).

When the server closes a connection whose client is still sending (a 413, 408 or 401 before
the body was read), closing at once would make the kernel answer the unread bytes with a
reset that destroys the response in flight: the client sees "connection reset" instead of
the error. The protocol closes gracefully instead, like nginx's lingering close: it sends
its end of the stream, then reads and discards for up to ``LINGER_SECONDS`` before closing
for good (a time bound, not a byte bound: on a fast link the kernel's buffers alone hold
megabytes, which a byte bound would swallow in a microsecond).

Everything after the headers (keys, body size and time, the in-flight cap) is
:class:`~agentic_retrieval.server.limits.GuardMiddleware`'s job.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import uvicorn
from starlette.applications import Starlette

from agentic_retrieval.server.errors import error_body
from agentic_retrieval.server.settings import ServerSettings

LINGER_SECONDS = 2.0
"""How long a closing connection keeps discarding what its client still sends."""


def bounded_protocol(header_timeout_seconds: float, max_header_bytes: int) -> type[Any]:
    """Uvicorn's HTTP protocol (httptools when installed, else h11) with header bounds."""
    base, awaiting_headers = _uvicorn_protocol()

    class BoundedHeaders(base):  # type: ignore[misc, valid-type]
        """uvicorn's protocol, plus a deadline and a size cap on each request's headers."""

        def connection_made(self, transport: asyncio.Transport) -> None:
            self._lingering = _LingeringClose(transport)
            super().connection_made(self._lingering)
            self._header_bytes = 0
            self._header_timer: asyncio.TimerHandle | None = None
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            self._lingering.lost()
            super().connection_lost(exc)

        def eof_received(self) -> bool | None:
            if self._lingering.closing:
                self._lingering.close_now()
            return super().eof_received()  # type: ignore[no-any-return]

        def data_received(self, data: bytes) -> None:
            if self._lingering.closing:
                return  # discarded: see LINGER_SECONDS
            if awaiting_headers(self):
                self._header_bytes += len(data)
                self._arm()
            super().data_received(data)
            if not awaiting_headers(self):
                # (this chunk may have held a body too: only still-pending headers count)
                self._disarm()
                self._header_bytes = 0
            elif self._header_bytes > max_header_bytes and not self.transport.is_closing():
                message = f"The request headers are larger than {max_header_bytes} bytes."
                self._refuse(431, "RequestHeaderFieldsTooLarge", message)

        def _arm(self) -> None:
            if self._header_timer is None:
                loop = asyncio.get_running_loop()
                self._header_timer = loop.call_later(header_timeout_seconds, self._expired)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expired(self) -> None:
            self._header_timer = None
            if self.transport.is_closing() or not awaiting_headers(self):
                return
            if self._header_bytes == 0:
                self.transport.close()  # never said anything: an idle connection
                return
            message = f"The request headers did not arrive within {header_timeout_seconds:g} s."
            self._refuse(408, "RequestTimeout", message)

        def _refuse(self, status: int, code: str, message: str) -> None:
            self._disarm()
            body = json.dumps(error_body(code, message)).encode()
            reason = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}[status]
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                % (status, reason, len(body), body)
            )
            self.transport.close()

    return BoundedHeaders


class _LingeringClose:
    """The connection's transport, with ``close()`` made graceful (see the module docstring).

    Everything else is the wrapped transport's; once closing, ``is_closing()`` is true, so
    uvicorn writes nothing more.
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.closing = False
        self._timer: asyncio.TimerHandle | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.closing or self._transport.is_closing()

    def close(self) -> None:
        if self.is_closing():
            return
        if not self._transport.can_write_eof():  # TLS: no half-close, close at once
            self._transport.close()
            return
        self.closing = True
        self._transport.write_eof()  # the response is flushed first, then our FIN
        self._transport.resume_reading()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(LINGER_SECONDS, self.close_now)

    def close_now(self) -> None:
        self.lost()
        self._transport.close()

    def lost(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _uvicorn_protocol() -> tuple[type[Any], Any]:
    """Uvicorn's preferred HTTP protocol class and a test for "headers not complete yet"."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is optional in uvicorn
        import h11
        from uvicorn.protocols.http.h11_impl import H11Protocol

        def h11_awaiting(protocol: Any) -> bool:
            return bool(protocol.conn.their_state is h11.IDLE)

        return H11Protocol, h11_awaiting

    def httptools_awaiting(protocol: Any) -> bool:
        # a new cycle starts when a request's headers are complete
        return protocol.cycle is None or bool(protocol.cycle.response_complete)

    return HttpToolsProtocol, httptools_awaiting


def uvicorn_config(
    app: Starlette, *, host: str = "127.0.0.1", port: int = 8000, **options: Any
) -> uvicorn.Config:
    """A uvicorn configuration for ``app`` (from :func:`create_app`) with its header limits.

    Args:
        app: The application; its ``state.settings`` (a :class:`ServerSettings`) gives the
            header timeout and size.
        host: The interface to listen on (unused when serving on given sockets).
        port: The port (0 picks a free one).
        **options: Further ``uvicorn.Config`` options (``log_level``, ``ssl_*``...).
    """
    settings: ServerSettings = getattr(app.state, "settings", None) or ServerSettings()
    protocol = bounded_protocol(settings.header_timeout_seconds, settings.max_header_bytes)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        h11_max_incomplete_event_size=settings.max_header_bytes,
        **options,
    )


def serve(app: Starlette, *, host: str, port: int, **options: Any) -> None:
    """Serve ``app`` until interrupted (what ``agentic-retrieval serve`` runs)."""
    uvicorn.Server(uvicorn_config(app, host=host, port=port, **options)).run()
