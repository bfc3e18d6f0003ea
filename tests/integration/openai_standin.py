"""A minimal OpenAI-compatible chat-completions server for tests (127.0.0.1 only).

It answers ``POST /v1/chat/completions`` from a script keyed by the structured-output
schema name the client asks for (``response_format.json_schema.name``, or the first tool's
name for function calling), and reports usage like the real API, so the real
``langchain-openai`` client code path runs end to end. A request with ``"stream": true`` is
answered as the real API streams: server-sent ``chat.completion.chunk`` frames carrying the
content (or the tool call's arguments) a few characters at a time, then ``[DONE]``.
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

    def __init__(
        self,
        script: dict[str, list[Any]],
        usage: dict[str, Any] | None = None,
        piece: int = 6,
    ):
        self.piece = piece
        """Characters per streamed chunk."""
        self.script = {name: deque(items) for name, items in script.items()}
        self.usage = usage or {
            "prompt_tokens": 321,
            "completion_tokens": 45,
            "total_tokens": 366,
            "completion_tokens_details": {"reasoning_tokens": 7},
        }
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        """The HTTP headers of each request, in order (names lowercased)."""
        self.paths: list[str] = []
        """The path (with its query) of each request, in order."""
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

    def chunks(self, payload: dict[str, Any], body: dict[str, Any]) -> list[dict[str, Any]]:
        """The streamed form of a completion: deltas of ``self.piece`` characters."""
        message = payload["choices"][0]["message"]
        base = {k: payload[k] for k in ("id", "created", "model")}
        base["object"] = "chat.completion.chunk"
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            text = call["function"]["arguments"]
            for i in range(0, len(text), self.piece):
                function = {"arguments": text[i : i + self.piece]}
                if i == 0:
                    function["name"] = call["function"]["name"]
                part = {"index": 0, "function": function}
                if i == 0:
                    part |= {"id": call["id"], "type": "function"}
                deltas.append({"tool_calls": [part]})
        else:
            text = message["content"] or ""
            deltas += [
                {"content": text[i : i + self.piece]} for i in range(0, len(text), self.piece)
            ]
        chunks = [
            {**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas
        ]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": payload["usage"]})
        return chunks

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                with outer._lock:
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    outer.paths.append(self.path)
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.split("?", 1)[0].endswith("/chat/completions"):
                    status, payload = 404, {"error": {"message": "not found"}}
                else:
                    status, payload = outer._answer(body)
                if status == 200 and body.get("stream"):
                    self._stream(outer.chunks(payload, body))
                    return
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, chunks: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        return Handler
