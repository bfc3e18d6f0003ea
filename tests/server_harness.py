"""Knowledge bases and a real uvicorn server for the server tests (all on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentic_retrieval import InMemoryKnowledgeSource, KnowledgeBase
from tests.fakes import SHARED_DATA

FARES = [
    {
        "key": "fare-single",
        "title": "Single fares",
        "content": "A single tram fare in zone A costs 2.60 dollars; children pay 1 dollar.",
    },
    {
        "key": "fare-pass",
        "title": "Harbor Pass",
        "content": "The monthly Harbor Pass costs 78 dollars; students pay half, 39 dollars.",
    },
    {
        "key": "fare-bike",
        "title": "Bike fares",
        "content": "Harborbike rides cost 1 dollar to unlock plus 15 cents per minute.",
    },
]
HOURS = [
    {
        "key": "hours-sunday",
        "title": "Sunday service",
        "content": "On Sunday the last Hillcrest Line tram leaves at 23:00.",
    },
    {
        "key": "hours-night",
        "title": "Night tram",
        "content": "The night tram runs every 30 minutes from midnight to 5 am.",
    },
]


def transit_kb(*extra: Any, name: str = "transit", chat_model: Any = None) -> KnowledgeBase:
    """Two in-memory sources (``fares``, ``hours``) plus any ``extra`` sources."""
    sources = [
        InMemoryKnowledgeSource("fares", FARES, description="Tram and bike fares and passes."),
        InMemoryKnowledgeSource("hours", HOURS, description="Service hours."),
        *extra,
    ]
    return KnowledgeBase(
        sources, name=name, description="Harborline test KB", chat_model=chat_model
    )


def intents_body(text: str, **extra: Any) -> dict[str, Any]:
    """A minimal-effort request with one intent."""
    return {
        "intents": [{"type": "semantic", "search": text}],
        "retrievalReasoningEffort": {"kind": "minimal"},
        **extra,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_server(
    app: Any, *, ssl: dict[str, str] | None = None, startup_timeout: float = 15.0
) -> Iterator[str]:
    """Run ``app`` with uvicorn in a thread; yield its base URL; stop it afterwards.

    The server is configured as ``agentic-retrieval serve`` configures it (header limits
    from the app's settings).
    """
    import uvicorn

    from agentic_retrieval.server.serving import uvicorn_config

    port = free_port()
    config = uvicorn_config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", **(ssl or {})
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    scheme = "https" if ssl else "http"
    try:
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def real_docs_kb_dir(root: Path) -> Path:
    """A KB directory over ``../shared/data`` (Earth-book pages and Northwind PDFs), or over
    the bundled sample corpus when the shared data is absent."""
    from agentic_retrieval.kb.directory import KnowledgeBaseDirectory
    from agentic_retrieval.kb.loader import build_sample_kb

    if not SHARED_DATA.is_dir():
        return build_sample_kb(root / "sample-kb").path
    directory = KnowledgeBaseDirectory(root / "shared-kb").create(name="shared")
    directory.add_or_update_source("earth", description="NASA Earth book pages.")
    directory.add_or_update_source("northwind", description="Northwind benefits and handbook.")
    directory.index("earth", [SHARED_DATA / "earth-book" / "pages"])
    directory.index("northwind", [SHARED_DATA / "northwind"])
    directory.close()
    return directory.path


async def load(
    url: str,
    bodies: list[dict[str, Any]],
    *,
    clients: int,
    headers: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> list[tuple[int, dict[str, Any], float]]:
    """Send every body from ``clients`` concurrent clients; return (status, json, seconds)."""
    import httpx

    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    results: list[tuple[int, dict[str, Any], float]] = []

    async def worker() -> None:
        async with httpx.AsyncClient(timeout=timeout, headers=headers) as http:
            while not queue.empty():
                body = queue.get_nowait()
                started = time.perf_counter()
                response = await http.post(url, json=body)
                results.append(
                    (response.status_code, response.json(), time.perf_counter() - started)
                )

    await asyncio.gather(*(worker() for _ in range(clients)))
    return results


SHARED_DATA_QUESTIONS = [
    "What does the employee handbook say about workplace safety?",
    "Which plan covers out-of-network services?",
    "How do clouds affect the Earth's climate?",
    "What can PerksPlus reimburse?",
    "How are hurricanes observed from space?",
    "What is the deductible in Northwind Standard?",
    "Which satellite captured the volcanic plumes over the South Sandwich Islands?",
    "Which roles report to the chief executive?",
]
"""Questions over ../shared/data used by the load test and the load benchmark."""


def corpus_questions() -> list[str]:
    """Questions matching the corpus :func:`real_docs_kb_dir` indexes (shared data or sample)."""
    if SHARED_DATA.is_dir():
        return list(SHARED_DATA_QUESTIONS)
    from agentic_retrieval.kb.loader import sample_questions

    return [item["question"] for item in sample_questions()]


def parse_sse(text: str) -> list[tuple[str, Any]]:
    """The ``(event, data)`` pairs of a server-sent event stream's body."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


GUIDES_INDEX = {
    "name": "guides",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "title", "type": "Edm.String"},
        {"name": "content", "type": "Edm.String"},
    ],
}
"""A service index definition for the management and MCP tests."""

GUIDES = [
    {"id": "pass", "title": "Harbor Pass", "content": "The Harbor Pass costs 78 dollars a month."},
    {"id": "day", "title": "Day pass", "content": "A harbor day pass costs 6 dollars."},
    {"id": "bike", "title": "Bikes", "content": "Bikes cost 1 dollar to unlock."},
]
"""The documents of :data:`GUIDES_INDEX`."""
