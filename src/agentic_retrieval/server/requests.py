"""What every route reads from a request the same way.

Names in the path, the ``api-version``, a JSON body, and the base URL of the service a
response's links point at.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from fastapi import Request

from agentic_retrieval.kb.definitions import MAX_KEY_CHARS, MAX_NAME_CHARS
from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.wire.models import SUPPORTED_API_VERSIONS

_PARSE_ON_LOOP = 256 * 1024
"""Bodies up to this size are parsed on the event loop (a few milliseconds at most)."""
MAX_FILE_ID_CHARS = 128
"""Longest file id in a path (this service's ids are 36-character UUIDs)."""
PATH_PARAMETERS = {
    "name": ("name", MAX_NAME_CHARS),
    "key": ("document key", MAX_KEY_CHARS),
    "file_id": ("fileId", MAX_FILE_ID_CHARS),
}
"""Each path parameter of the routes: what messages call it, and its longest value."""


def check_path_names(request: Request) -> None:
    """Refuse an over-long name, key or file id in the path before anything looks it up.

    Installed as a dependency of every route (the MCP endpoint calls
    :func:`path_name_error` itself). Nothing longer than Azure's naming rules allow can
    exist here, so such a request is a 400 at once; the value is never echoed.
    """
    for parameter, value in request.path_params.items():
        error = path_name_error(parameter, str(value))
        if error is not None:
            raise error


def path_name_error(parameter: str, value: str) -> ApiError | None:
    """The 400 for ``value`` of path parameter ``parameter`` when it is too long, else ``None``."""
    what, limit = PATH_PARAMETERS.get(parameter, (parameter, MAX_NAME_CHARS))
    if len(value) <= limit:
        return None
    return ApiError(
        400,
        f"{what}: the {what} in the URL has {len(value)} characters; at most {limit} are allowed.",
    )


def public_base_url(request: Request) -> str:
    """The base URL a response's links point at: ``ServerSettings.public_url`` when set.

    Otherwise the address the server is bound to, as the connection's socket reports it
    (ASGI's ``server``). Never the ``Host`` header: any client can set it, and a link built
    from it (a ``citationUrl``, a ``nextLink`` a client follows with its key) would point
    wherever that client chose.
    """
    settings = getattr(request.app.state, "settings", None)
    configured = getattr(settings, "public_url", None)
    if configured:
        return str(configured)
    scheme = "https" if request.url.scheme == "https" else "http"
    host, port = request.scope.get("server") or (getattr(settings, "host", "127.0.0.1"), None)
    shown = f"[{host}]" if ":" in str(host) else str(host)
    default_port = 443 if scheme == "https" else 80
    if port is None or port == default_port:
        return f"{scheme}://{shown}"
    return f"{scheme}://{shown}:{port}"


def check_api_version(api_version: str | None) -> None:
    """Raise 400 naming the supported versions unless ``api_version`` is one of them."""
    if api_version not in SUPPORTED_API_VERSIONS:
        if api_version is None:
            given = "missing"
        elif len(api_version) <= 40:
            given = f"'{api_version}' is not supported"
        else:  # not echoed: nothing that long is a version
            given = f"a value of {len(api_version)} characters is not supported"
        raise ApiError(
            400,
            f"api-version: {given}; supported versions are {', '.join(SUPPORTED_API_VERSIONS)}.",
            code="InvalidApiVersion",
        )


async def read_json_object(request: Request) -> dict[str, Any]:
    """Parse the body as a JSON object, answering 400 for anything else."""
    raw = await request.body()
    if not raw.strip():
        raise ApiError(400, "body: the request body is empty; send a JSON object.")
    try:
        # a 16 MiB body is a second of parsing: off the event loop, so other requests go on
        payload = (
            await asyncio.to_thread(parse_json, raw)
            if len(raw) > _PARSE_ON_LOOP
            else parse_json(raw)
        )
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ApiError(400, f"body: malformed JSON ({reason}).", code="MalformedJson") from exc
    if not isinstance(payload, dict):
        raise ApiError(400, f"body: expected a JSON object, got {type(payload).__name__}.")
    return payload


def parse_json(raw: bytes) -> Any:
    r"""Strict JSON: what ``json.loads`` accepts beyond the standard is refused.

    ``NaN`` and ``Infinity`` would be stored, then fail every response that includes them;
    a lone UTF-16 surrogate (``"\ud800"``) is no text and fails when written. Both are a
    ``ValueError`` here; strings are walked only when a fast scan of the bytes finds a
    candidate. (A number that overflows to infinity, ``1e400``, is refused where values are
    typed: document fields, vectors, the retrieve request's bounds.)

    Raises:
        ValueError: Malformed or non-standard JSON (the message says what).
        RecursionError: Nested too deeply.
    """
    payload = json.loads(raw, parse_constant=_no_constant)
    if _SURROGATE_ESCAPE.search(raw) or _SURROGATE_BYTES.search(raw):
        _check_strings(payload)
    return payload


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE_BYTES = re.compile(rb"\xed[\xa0-\xbf]")
"""A surrogate escaped (``\ud800``) or encoded as bytes (which ``json.loads`` lets through)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _check_strings(payload: Any) -> None:
    """Refuse strings (values or keys) holding an unpaired surrogate, walking iteratively."""
    pending = [payload]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("a string holds an unpaired UTF-16 surrogate (not text)") from None
