"""``/healthz`` tells a starved service from a healthy one; searches have threads of their own."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from fastapi.testclient import TestClient
from tests.server_harness import transit_kb

from agentic_retrieval.server import ServerSettings, create_app
from agentic_retrieval.sources.local.query_threads import QUERY_THREADS, query_executor, run_query

pytestmark = pytest.mark.timeout(60)


def health_until(
    client: TestClient, status: int, seconds: float = 15.0, figure: str = "", above: int = -1
) -> dict:
    """Poll /healthz until it answers ``status`` (with ``figure`` over ``above``)."""
    deadline = time.monotonic() + seconds  # generous: a loaded machine lags on its own
    while True:
        response = client.get("/healthz")
        body = response.json()
        if response.status_code == status and (not figure or body[figure] > above):
            return body
        assert time.monotonic() < deadline, (response.status_code, body)
        time.sleep(0.05)


def test_healthz_is_503_while_the_query_threads_are_saturated():
    settings = ServerSettings(read_env_keys=False, health_max_query_wait_seconds=0.3)
    release = threading.Event()
    with TestClient(create_app(transit_kb(), settings=settings, mcp=False)) as client:
        healthy = health_until(client, 200)
        assert healthy["conversions"] == {"running": 0, "queued": 0}
        busy = [query_executor().submit(release.wait, 10) for _ in range(QUERY_THREADS)]
        try:
            starved = health_until(client, 503, figure="queryWaitMs", above=300)
            assert starved["status"] == "starved"
        finally:
            release.set()
        for future in busy:
            future.result(5)
        health_until(client, 200)  # recovered once the samples age out


def test_healthz_is_503_while_the_event_loop_lags():
    settings = ServerSettings(read_env_keys=False, health_max_loop_lag_seconds=0.2)
    app = create_app(transit_kb(), settings=settings, mcp=False)

    async def stall() -> dict[str, str]:
        time.sleep(0.6)  # blocks the loop, as a CPU-bound handler would
        return {}

    app.add_api_route("/stall", stall)
    with TestClient(app) as client:
        health_until(client, 200)
        client.get("/stall")
        assert health_until(client, 503, figure="eventLoopLagMs", above=200)


async def test_searches_never_wait_behind_the_default_pool():
    loop = asyncio.get_running_loop()
    release = threading.Event()
    hogs = [loop.run_in_executor(None, release.wait, 10) for _ in range(64)]
    try:
        started = time.monotonic()
        assert await asyncio.wait_for(run_query(sum, [1, 2, 3]), 2) == 6
        assert time.monotonic() - started < 2
    finally:
        release.set()
        await asyncio.gather(*hogs)


async def test_healthz_is_503_saturated_while_the_request_slots_are_full():
    # issue 27: a server answering 429 to every new request says so, for a load balancer;
    # its figures name the slots in use (its own request is not counted)
    import httpx
    from tests.fakes import SlowSource

    from agentic_retrieval import KnowledgeBase

    kb = KnowledgeBase([SlowSource(delay=1.0)], name="slowkb")
    settings = ServerSettings(read_env_keys=False, max_in_flight=1)
    app = create_app(kb, settings=settings, mcp=False)
    transport = httpx.ASGITransport(app=app)
    body = {"intents": [{"search": "x"}], "retrievalReasoningEffort": {"kind": "minimal"}}
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        idle = await c.get("/healthz")
        assert idle.status_code == 200 and idle.json()["status"] == "ok"
        assert idle.json()["requests"]["inFlight"] == 0
        slow = asyncio.ensure_future(
            c.post("/knowledgebases/slowkb/retrieve?api-version=2026-04-01", json=body)
        )
        for _ in range(100):  # (bounded: 5 s at most)
            busy = await c.get("/healthz")
            if busy.status_code == 503:
                break
            await asyncio.sleep(0.05)
        assert busy.status_code == 503, busy.json()
        assert busy.json()["status"] == "saturated"
        assert busy.json()["requests"]["inFlight"] == busy.json()["requests"]["maxInFlight"] == 1
        assert (await slow).status_code == 200
        after = await c.get("/healthz")
    assert after.status_code == 200 and after.json()["requests"]["inFlight"] == 0
