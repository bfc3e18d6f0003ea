"""What every route reads from a request the same way: the ``api-version`` and a JSON body."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from agentic_retrieval.server.errors import ApiError
from agentic_retrieval.wire.models import SUPPORTED_API_VERSIONS


def check_api_version(api_version: str | None) -> None:
    """Raise 400 naming the supported versions unless ``api_version`` is one of them."""
    if api_version not in SUPPORTED_API_VERSIONS:
        given = "missing" if api_version is None else f"'{api_version}' is not supported"
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
        payload = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ApiError(400, f"body: malformed JSON ({reason}).", code="MalformedJson") from exc
    if not isinstance(payload, dict):
        raise ApiError(400, f"body: expected a JSON object, got {type(payload).__name__}.")
    return payload
