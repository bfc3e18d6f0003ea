"""Heavy ``docs/index`` batches cannot stall queries (issue 27, item 4).

One batch of 450 documents x 3,000 collection values (15 MB) took a minute of a core and
was stored at 8.4x its size; three at once starved the event loop (2.6 s) and slowed a
retrieve on that index to 30 s. Each document's collection values were encoded again for
each of its chunks (now once), the batch was checked on the event loop (now on a thread),
and nothing bounded a batch's values or how many heavy batches ran at once: now a batch
over :data:`MAX_BATCH_VALUES` is a 413 that names the bound, and a second heavy batch while
one is applied is a 503 with ``Retry-After``.
"""

from __future__ import annotations

import concurrent.futures
import json
import time

import httpx
import pytest
from tests.server_harness import running_server

from agentic_retrieval.kb.index_documents import HEAVY_BATCH_VALUES, MAX_BATCH_VALUES
from agentic_retrieval.kb.service import ServiceDirectory
from agentic_retrieval.server import ServerSettings, create_app

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]
KEY = "admin-key"
VALUES = 3000
INDEX = {
    "name": "heavy",
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String"},
        {"name": "tags", "type": "Collection(Edm.String)"},
    ],
}


def batch(prefix: str, documents: int) -> bytes:
    docs = [
        {
            "@search.action": "upload",
            "id": f"{prefix}{n}",
            "content": f"night tram {n}",
            "tags": [f"{n:03d}{v:04d}" for v in range(VALUES)],
        }
        for n in range(documents)
    ]
    return json.dumps({"value": docs}).encode()


@pytest.fixture
def url(tmp_path):
    service = ServiceDirectory(tmp_path / "data")
    settings = ServerSettings(api_keys=[KEY], read_env_keys=False)
    with running_server(create_app(service=service, settings=settings)) as base:
        with client(base) as http:
            assert http.put("/indexes('heavy')", json=INDEX).status_code == 201
        yield base
    service.close()


def client(base: str) -> httpx.Client:
    return httpx.Client(
        base_url=base,
        headers={"api-key": KEY, "content-type": "application/json"},
        params={"api-version": "2026-04-01"},
        timeout=300,
    )


def test_a_batch_over_the_value_budget_is_a_413_naming_it_and_changes_nothing(url):
    documents = MAX_BATCH_VALUES // VALUES + 1
    with client(url) as http:
        response = http.post("/indexes('heavy')/docs/index", content=batch("a", documents))
        assert response.status_code == 413, response.text[:300]
        message = response.json()["error"]["message"]
        assert f"{documents * VALUES} collection values in one batch" in message
        assert f"at most {MAX_BATCH_VALUES}" in message and "split the batch" in message
        assert http.get("/indexes('heavy')/docs/$count").text == "0"


def test_heavy_batches_take_turns_and_the_loop_keeps_answering(url):
    """Two heavy batches at once: one is applied, the other a 503 with Retry-After; retried
    after it, it is applied. Meanwhile ``/healthz`` answers promptly (nothing heavy runs on
    the event loop)."""
    big = batch("a", MAX_BATCH_VALUES // VALUES)  # the most one batch may hold
    small = batch("b", HEAVY_BATCH_VALUES // VALUES)  # the least that is heavy
    answers: list[httpx.Response] = []
    health: list[float] = []

    def send_big() -> httpx.Response:
        with client(url) as own:
            return own.post("/indexes('heavy')/docs/index", content=big)

    with client(url) as http, concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(send_big)
        deadline = time.monotonic() + 240
        while not first.done() and time.monotonic() < deadline:
            started = time.perf_counter()
            http.get("/healthz")
            health.append(time.perf_counter() - started)
            if not any(a.status_code == 503 for a in answers) and len(health) % 4 == 0:
                answers.append(http.post("/indexes('heavy')/docs/index", content=small))
            time.sleep(0.05)
        every = [first.result(), *answers]
        assert {a.status_code for a in every} == {200, 503}, [a.status_code for a in every]
        refused = next(a for a in every if a.status_code == 503)
        assert refused.headers["retry-after"] == "5"
        assert "large batches are applied one at a time" in refused.json()["error"]["message"]
        assert max(health) < 1.5, f"/healthz took {max(health):.2f} s during a heavy batch"
        retry = big if first.result().status_code == 503 else small
        assert http.post("/indexes('heavy')/docs/index", content=retry).status_code == 200
        count = int(http.get("/indexes('heavy')/docs/$count").text)
        assert count == (MAX_BATCH_VALUES + HEAVY_BATCH_VALUES) // VALUES
