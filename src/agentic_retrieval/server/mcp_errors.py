"""MCP errors in the request's terms: no validation library's text reaches a client.

The MCP SDK answers a message that is not JSON-RPC with its own validation text (``4
validation errors for union[JSONRPCRequest,...]``, a link to the validation library's
documentation), and tool arguments of the wrong type the same way inside the tool's result.
The README promises no internal text in bodies, and the SDK offers no hook for its transport's
wording, so:

- :class:`PlainTransportErrors` wraps one HTTP request's ASGI ``receive`` and ``send``: it
  keeps the body the SDK reads, and replaces the message of the SDK's parse (-32700) and
  validation (-32602) answers with what is wrong with that body, said plainly
  (:func:`message_problem`); a malformed message is an Invalid Request (-32600), as JSON-RPC
  2.0 names it.
- :func:`argument_problem` says what is wrong with a tool call's arguments (the field and
  what it should be), for the tool error the model reads.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from starlette.types import Message, Receive, Send

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
MAX_KEPT_BODY = 16 * 1024 * 1024
"""Bodies are bounded before MCP sees them (``max_body_bytes``); this only guards the copy."""
_SDK_WORDING = ("Parse error", "Validation error")
_PLAIN_TYPES = {
    "model_type": "should be an object",
    "model_attributes_type": "should be an object",
    "dict_type": "should be an object",
    "list_type": "should be an array",
}
"""Pydantic messages that name a Python class or type, said in JSON's words."""


def message_problem(body: bytes) -> tuple[int, str]:
    """What makes ``body`` no JSON-RPC 2.0 message: a JSON-RPC error code and a message."""
    try:
        message = json.loads(body)
    except ValueError:  # UnicodeDecodeError included
        return PARSE_ERROR, "Parse error: the body is not valid JSON."
    if isinstance(message, list):
        return INVALID_REQUEST, (
            "Invalid Request: batches are not supported; send one JSON-RPC message, a JSON object."
        )
    if not isinstance(message, dict):
        return INVALID_REQUEST, "Invalid Request: a JSON-RPC message is a JSON object."
    return INVALID_REQUEST, f"Invalid Request: {_object_problem(message)}"


def _object_problem(message: dict[str, Any]) -> str:
    if message.get("jsonrpc") != "2.0":
        return "'jsonrpc' must be \"2.0\"."
    if "id" in message and not _is_id(message["id"]) and "error" not in message:
        return "'id' must be a string or an integer."
    if "method" in message:
        if not isinstance(message["method"], str):
            return "'method' must be a string."
        if message.get("params") is not None and not isinstance(message["params"], dict):
            return "'params' must be an object."
        return "the message is not a request or a notification this server accepts."
    if "result" in message:
        if not _is_id(message.get("id")):
            return "a response needs an 'id', a string or an integer."
        return "'result' must be an object."
    if "error" in message:
        error = message["error"]
        if not (isinstance(error, dict) and _is_int(error.get("code"))):
            return "'error' must be an object with an integer 'code' and a string 'message'."
        return "'error.message' must be a string."
    return "a request needs a 'method' (and an 'id', unless it is a notification)."


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or _is_int(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def argument_problem(error: ValidationError) -> str:
    """Each invalid tool argument and what it should be, one clause each.

    Pydantic's messages, except those naming a Python class or type; never the input value.
    """
    clauses = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in item["loc"]) or "arguments"
        text = _PLAIN_TYPES.get(item["type"]) or _lower_first(item["msg"])
        clauses.append(f"{where}: {text}")
    return "; ".join(clauses)


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


class PlainTransportErrors:
    """One HTTP request's ``receive`` and ``send``, with the SDK's transport errors reworded.

    Args:
        receive: The request's ASGI ``receive``.
        send: The request's ASGI ``send``.
    """

    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self._body = bytearray()
        self._start: Message | None = None
        self._held = bytearray()

    async def receive(self) -> Message:
        """The next request message (its body kept, to say what is wrong with it)."""
        message = await self._receive()
        if message["type"] == "http.request" and len(self._body) < MAX_KEPT_BODY:
            self._body += message.get("body", b"")
        return message

    async def send(self, message: Message) -> None:
        """Send ``message``, holding a 400 JSON answer until it can be reworded."""
        if message["type"] == "http.response.start" and _is_json_400(message):
            self._start = message
            return
        if self._start is None or message["type"] != "http.response.body":
            await self._send(message)
            return
        self._held += message.get("body", b"")
        if message.get("more_body"):
            return
        body = self._reworded(bytes(self._held))
        headers = [(k, v) for k, v in self._start.get("headers", []) if k != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await self._send({**self._start, "headers": headers})
        await self._send({"type": "http.response.body", "body": body})

    def _reworded(self, answer: bytes) -> bytes:
        try:
            reply = json.loads(answer)
        except ValueError:
            return answer
        error = reply.get("error") if isinstance(reply, dict) else None
        if not (isinstance(error, dict) and str(error.get("message", "")).startswith(_SDK_WORDING)):
            return answer
        code, text = message_problem(bytes(self._body))
        reply["error"] = {"code": code, "message": text}
        return json.dumps(reply, separators=(",", ":")).encode()


def _is_json_400(start: Message) -> bool:
    headers = dict(start.get("headers", []))
    return start.get("status") == 400 and headers.get(b"content-type", b"").startswith(
        b"application/json"
    )
