"""Slow, unauthenticated, oversized and abandoned requests against a real uvicorn on 127.0.0.1.

Each test speaks raw HTTP over a socket where the client's pace matters (a byte a second,
a body that never ends, a hang-up mid-run) and checks what a legitimate client notices:
answers keep coming, refusals come at once, abandoned work stops.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from tests.server_harness import intents_body, running_server, transit_kb

from agentic_retrieval import KnowledgeBase, SearchQuery
from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.sources.base import Hit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEY = "hostile-test-key"
RETRIEVE = "/knowledgebases/{name}/retrieve?api-version=2026-04-01"


class CancellableSource:
    """A source that takes ``delay`` seconds and records whether it was cancelled."""

    kind = "searchIndex"
    description = "Slow, and notices cancellation."

    def __init__(self, name: str = "slow", delay: float = 8.0) -> None:
        self.name = name
        self.delay = delay
        self.started = threading.Event()
        self.cancelled_at: float | None = None
        self.finished = False

    async def search(self, query: SearchQuery) -> list[Hit]:
        self.started.set()
        try:
            await asyncio.sleep(self.delay)
        except asyncio.CancelledError:
            self.cancelled_at = time.monotonic()
            raise
        self.finished = True
        return [Hit(doc_key="late", content="late", source=self.name, score=1.0)]


def settings(**overrides) -> ServerSettings:
    values = {"api_keys": [KEY], "read_env_keys": False}
    return ServerSettings(**{**values, **overrides})


@pytest.fixture
def server(request) -> Iterator[str]:
    options = getattr(request, "param", {})
    app = create_app(transit_kb(), settings=settings(**options))
    with running_server(app) as base:
        yield base


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


async def open_raw(base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port_of(base))


def post_head(
    path: str, length: int | None, key: str | None = None, extra: str = "", host: str = "127.0.0.1"
) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if key:
        lines.append(f"api-key: {key}")
    return ("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode()


async def read_response(reader: asyncio.StreamReader, timeout: float) -> tuple[int, dict, bytes]:
    """Status, headers and body of one response (the body up to Content-Length)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {}
    for line in header_lines:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", 0))
    body = await asyncio.wait_for(reader.readexactly(length), timeout) if length else b""
    return int(status_line.split()[1]), headers, body


async def closed_by_server(reader: asyncio.StreamReader, timeout: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), timeout) == b""
    except ConnectionError:
        return True


async def trickle(writer: asyncio.StreamWriter, data: bytes, every: float) -> None:
    """Send ``data`` one byte every ``every`` seconds until done or the server hangs up."""
    try:
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(every)
    except ConnectionError:
        return


async def legitimate(base: str, count: int, name: str = "transit") -> list[int]:
    async with httpx.AsyncClient(timeout=10, headers={"api-key": KEY}) as http:
        codes = []
        for _ in range(count):
            response = await http.post(base + RETRIEVE.format(name=name), json=intents_body("bike"))
            codes.append(response.status_code)
        return codes


# --- item 1: slow and unauthenticated clients ------------------------------------------------


@pytest.mark.parametrize("server", [{"max_in_flight": 4}], indirect=True)
async def test_slow_unauthenticated_bodies_get_401_at_once_and_lock_nobody_out(server):
    connections = [await open_raw(server) for _ in range(4)]
    started = time.monotonic()
    for _, writer in connections:
        writer.write(post_head(RETRIEVE.format(name="transit"), 88))
    answers = [await read_response(reader, timeout=2) for reader, _ in connections]
    assert [status for status, _, _ in answers] == [401] * 4
    assert all(headers["connection"] == "close" for _, headers, _ in answers)
    assert json.loads(answers[0][2])["error"]["code"] == "Unauthorized"
    assert time.monotonic() - started < 2
    assert await legitimate(server, 5) == [200] * 5
    for _, writer in connections:
        writer.close()


@pytest.mark.parametrize("server", [{"max_in_flight": 1, "max_receiving_bodies": 1}], indirect=True)
async def test_a_body_being_received_holds_a_receiving_slot_not_a_processing_one(server):
    # (issue 19: the bodies buffered at once are bounded; issue 27: in a budget of their own,
    # so slow bodies never take the slots of requests being processed)
    reader, writer = await open_raw(server)
    body = json.dumps(intents_body("bike")).encode()
    writer.write(post_head(RETRIEVE.format(name="transit"), len(body), key=KEY))
    sender = asyncio.create_task(trickle(writer, body, every=0.05))
    await asyncio.sleep(0.3)
    assert await legitimate(server, 2) == [429] * 2  # the one receiving slot is taken
    async with httpx.AsyncClient(timeout=10, headers={"api-key": KEY}) as http:
        listed = await http.get(server + "/v1/models")
    assert listed.status_code == 200  # the one processing slot is free
    await sender
    status, _, _ = await read_response(reader, timeout=5)
    assert status == 200  # the slow client is served in the end
    writer.close()
    assert await legitimate(server, 2) == [200] * 2  # and its slot is free again


QUERY_KEY = "hostile-query-key"
UPLOADS = [
    ("POST", "/knowledgesources/docs/files"),
    ("PUT", "/knowledgesources('docs')/files('abc')"),
    ("POST", "/indexes/guides/docs/index"),
    ("POST", "/indexes('guides')/docs/search.index"),
    ("PUT", "/knowledgebases('transit')"),
    ("POST", "/indexes"),
]


@pytest.mark.parametrize("server", [{"query_keys": [QUERY_KEY], "max_in_flight": 8}], indirect=True)
async def test_a_query_key_is_refused_an_admin_body_before_any_of_it_is_read(server):
    # 60 connections announcing 16 MiB uploads with a query key: each is answered 403 from
    # its headers and closed; none is buffered, none holds a slot
    connections = [await open_raw(server) for _ in range(60)]
    started = time.monotonic()
    for n, (_, writer) in enumerate(connections):
        method, path = UPLOADS[n % len(UPLOADS)]
        head = post_head(path, 16 * 1024 * 1024, key=QUERY_KEY)
        writer.write(head.replace(b"POST", method.encode(), 1))
    answers = [await read_response(reader, timeout=5) for reader, _ in connections]
    assert [status for status, _, _ in answers] == [403] * 60
    assert all(headers["connection"] == "close" for _, headers, _ in answers)
    assert "needs an admin key" in json.loads(answers[0][2])["error"]["message"]
    assert time.monotonic() - started < 5
    assert all([await closed_by_server(reader, 2) for reader, _ in connections])
    assert await legitimate(server, 3) == [200] * 3
    async with httpx.AsyncClient(timeout=10, headers={"api-key": QUERY_KEY}) as http:
        allowed = await http.post(server + RETRIEVE.format(name="transit"), json=intents_body("x"))
    assert allowed.status_code == 200  # a query body where query keys belong is read


@pytest.mark.parametrize("server", [{"body_timeout_seconds": 1.0}], indirect=True)
async def test_a_body_shorter_than_its_content_length_is_408_after_the_body_timeout(server):
    reader, writer = await open_raw(server)
    started = time.monotonic()
    writer.write(post_head(RETRIEVE.format(name="transit"), 1000, key=KEY) + b"0123456789")
    status, headers, body = await read_response(reader, timeout=5)
    assert status == 408 and headers["connection"] == "close"
    assert json.loads(body)["error"]["code"] == "RequestTimeout"
    assert 0.9 < time.monotonic() - started < 3
    assert await closed_by_server(reader, timeout=2)
    writer.close()


async def test_a_declared_100_mb_body_is_413_before_any_of_it_is_sent(server):
    reader, writer = await open_raw(server)
    writer.write(post_head(RETRIEVE.format(name="transit"), 100 * 1024 * 1024, key=KEY))
    status, headers, body = await read_response(reader, timeout=2)
    assert status == 413 and headers["connection"] == "close"
    assert "larger than the limit of 1048576 bytes" in json.loads(body)["error"]["message"]
    assert await closed_by_server(reader, timeout=2)
    writer.close()


class Recorder(asyncio.Protocol):
    """Keeps every byte received, even when the connection ends with a reset later."""

    def __init__(self) -> None:
        self.received = b""
        self.lost = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.received += data

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


async def test_an_undeclared_endless_body_is_cut_off_at_the_limit(server):
    loop = asyncio.get_running_loop()
    transport, recorder = await loop.create_connection(Recorder, "127.0.0.1", port_of(server))
    head = post_head(
        RETRIEVE.format(name="transit"), None, key=KEY, extra="Transfer-Encoding: chunked\r\n"
    )
    transport.write(head)
    chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    sent = 0
    # a client that reads while it sends (as browsers do) stops when the answer comes
    while sent < 100 * 1024 * 1024 and not recorder.received and not recorder.lost.done():
        transport.write(chunk)
        sent += 65536
        await asyncio.sleep(0)  # write() never yields: let the answer be read
        while transport.get_write_buffer_size() > 1024 * 1024 and not recorder.received:
            await asyncio.sleep(0.001)
    answered = time.monotonic()
    await asyncio.wait_for(recorder.lost, 10)
    transport.close()
    assert recorder.received.startswith(b"HTTP/1.1 413 ")
    # refused after the 1 MiB limit (plus what the socket buffers took), not after 100 MB
    assert sent < 32 * 1024 * 1024
    assert time.monotonic() - answered < 4  # and the connection is closed soon after


@pytest.mark.parametrize("server", [{"header_timeout_seconds": 1.0}], indirect=True)
async def test_slow_headers_get_408_and_idle_connections_are_closed(server):
    slow_reader, slow_writer = await open_raw(server)
    idle_reader, idle_writer = await open_raw(server)
    head = post_head(RETRIEVE.format(name="transit"), 10)
    sender = asyncio.create_task(trickle(slow_writer, head, every=0.2))
    await asyncio.sleep(0.3)
    assert await legitimate(server, 3) == [200] * 3  # meanwhile, others are served
    status, headers, body = await read_response(slow_reader, timeout=3)
    assert status == 408 and headers["connection"] == "close"
    assert "headers did not arrive within 1 s" in json.loads(body)["error"]["message"]
    assert await closed_by_server(idle_reader, timeout=3)  # sent nothing: just closed
    await sender
    slow_writer.close()
    idle_writer.close()


@pytest.mark.parametrize("server", [{"max_header_bytes": 4096}], indirect=True)
async def test_oversized_headers_get_431(server):
    reader, writer = await open_raw(server)
    writer.write(post_head(RETRIEVE.format(name="transit"), 2, extra=f"X-Junk: {'j' * 8000}\r\n"))
    status, headers, _ = await read_response(reader, timeout=3)
    assert status == 431 and headers["connection"] == "close"
    writer.close()


@pytest.mark.parametrize("server", [{"max_in_flight": 1}], indirect=True)
async def test_mcp_get_streams_are_refused_and_hold_no_slot(server):
    async with httpx.AsyncClient(timeout=5, headers={"api-key": KEY}) as http:
        streams = [
            await http.get(
                f"{server}/knowledgebases/transit/mcp", headers={"Accept": "text/event-stream"}
            )
            for _ in range(3)
        ]
    assert [r.status_code for r in streams] == [405] * 3
    assert streams[0].headers["allow"] == "POST"
    assert await legitimate(server, 2) == [200, 200]


# --- item 2: abandoned requests stop ----------------------------------------------------------


def slow_app(source: CancellableSource, **overrides):
    kb = KnowledgeBase([source], name="slowkb")
    return create_app(kb, settings=settings(**overrides))


async def hang_up_once_searching(base: str, request: bytes, source: CancellableSource) -> None:
    _, writer = await open_raw(base)
    writer.write(request)
    await writer.drain()
    assert await asyncio.to_thread(source.started.wait, 10), "the search never started"
    writer.close()


def retrieve_request(accept: str | int = "application/json") -> bytes:
    accept = accept if isinstance(accept, str) else "application/json"
    body = json.dumps(intents_body("anything")).encode()
    head = post_head(
        RETRIEVE.format(name="slowkb"), len(body), key=KEY, extra=f"Accept: {accept}\r\n"
    )
    return head + body


def mcp_request(port: int) -> bytes:
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "knowledge_base_retrieve",
            "arguments": {"query": "x", "effort": "minimal"},
        },
    }
    body = json.dumps(call).encode()
    extra = "Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n"
    path = "/knowledgebases/slowkb/mcp"
    host = f"127.0.0.1:{port}"  # the MCP SDK's DNS-rebinding guard wants the port
    return post_head(path, len(body), key=KEY, extra=extra, host=host) + body


@pytest.mark.parametrize(
    "request_bytes",
    [retrieve_request, lambda _port: retrieve_request("text/event-stream"), mcp_request],
    ids=["rest", "sse", "mcp"],
)
async def test_a_run_is_cancelled_when_its_client_disconnects(request_bytes):
    source = CancellableSource()
    with running_server(slow_app(source, max_in_flight=1)) as base:
        await hang_up_once_searching(base, request_bytes(port_of(base)), source)
        hung_up = time.monotonic()
        deadline = hung_up + 3
        while source.cancelled_at is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert source.cancelled_at is not None, "the abandoned search kept running"
        assert source.cancelled_at - hung_up < 1.0
        assert not source.finished
        # and its request slot is free again: the next request runs (and is served)
        source.delay = 0.01
        async with httpx.AsyncClient(timeout=10, headers={"api-key": KEY}) as http:
            response = await http.post(
                base + RETRIEVE.format(name="slowkb"), json=intents_body("x")
            )
        assert response.status_code == 200
