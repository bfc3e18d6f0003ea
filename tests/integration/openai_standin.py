"""A minimal OpenAI-compatible chat-completions server for tests (127.0.0.1 only).

It answers ``POST /v1/chat/completions`` from a script keyed by the structured-output
schema name the client asks for (``response_format.json_schema.name``, or the first tool's
name for function calling), and reports usage like the real API, so the real
``langchain-openai`` client code path runs end to end.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OpenAIStandIn:
    """Start with ``with OpenAIStandIn(script) as server:``; ``server.base_url`` is /v1."""

    def __init__(self, script: dict[str, list[Any]], usage: dict[str, Any] | None = None):
        self.script = {name: deque(items) for name, items in script.items()}
        self.usage = usage or {
            "prompt_tokens": 321,
            "completion_tokens": 45,
            "total_tokens": 366,
            "completion_tokens_details": {"reasoning_tokens": 7},
        }
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> OpenAIStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        fmt = body.get("response_format") or {}
        name = (fmt.get("json_schema") or {}).get("name")
        tools = body.get("tools") or []
        if name is None and tools:
            name = tools[0]["function"]["name"]
        with self._lock:
            self.requests.append(body)
            queue = self.script.get(name or "text")
            if not queue:
                return 500, {"error": {"message": f"no scripted answer for {name}"}}
            planned = queue.popleft()
        content = planned if isinstance(planned, str) else json.dumps(planned)
        message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
        if tools and name and not fmt:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": name, "arguments": content},
                    }
                ],
            }
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stand-in"),
            "choices": [
                {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
            ],
            "usage": self.usage,
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    status, payload = 404, {"error": {"message": "not found"}}
                else:
                    status, payload = outer._answer(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        return Handler
