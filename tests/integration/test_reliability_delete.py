"""Deleting and re-creating what others are reading never takes the service down.

Issue 19 (1): deleting an index, a file source or a knowledge base -> source -> index chain
while readers searched or retrieved from it crashed ``serve --data`` with SIGSEGV (a SQLite
connection closed under a running statement) or answered 500. Here readers loop over every
read route while churners create, fill and delete all three kinds for 30 s; the server must
stay up, never answer 500, and answer the reads of what is gone with 404 (document and file
routes) or a 206 whose error record names the source (retrieve). Once with two workers,
where one worker deletes the store file another worker is reading.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, serve_process

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

CHURN_SECONDS = 30.0
READERS = 4
INDEX = {
    "fields": [
        {"name": "id", "type": "Edm.String", "key": True},
        {"name": "content", "type": "Edm.String", "searchable": True},
    ]
}
DOCS = [{"id": f"d{n}", "content": f"harbour tram note {n}"} for n in range(50)]
MINIMAL = {"retrievalReasoningEffort": {"kind": "minimal"}}


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"api-key": KEY}, params=VERSION, timeout=60)


def churn_index(http: httpx.Client) -> None:
    """Create an index, upload 50 documents, delete it."""
    http.put("/indexes('solo')", json={"name": "solo", **INDEX})
    http.post("/indexes('solo')/docs/index", json={"value": DOCS})
    http.delete("/indexes('solo')")


def churn_chain(http: httpx.Client) -> None:
    """Create index -> source -> knowledge base, fill the index, delete all three."""
    http.put("/indexes('chained')", json={"name": "chained", **INDEX})
    http.post("/indexes('chained')/docs/index", json={"value": DOCS})
    source = {"name": "ks", "kind": "searchIndex"}
    source["searchIndexParameters"] = {"searchIndexName": "chained"}
    http.put("/knowledgesources('ks')", json=source)
    base = {"name": "chain", "knowledgeSources": [{"name": "ks"}]}
    http.put("/knowledgebases('chain')", json=base)
    time.sleep(0.2)  # let readers reach it
    http.delete("/knowledgebases('chain')")
    http.delete("/knowledgesources('ks')")
    http.delete("/indexes('chained')")


def churn_files(http: httpx.Client) -> None:
    """Create a file source and a knowledge base over it, upload 3 files, delete both."""
    http.put("/knowledgesources('fs')", json={"name": "fs", "kind": "file", "fileParameters": {}})
    base = {"name": "files", "knowledgeSources": [{"name": "fs"}]}
    http.put("/knowledgebases('files')", json=base)
    for n in range(3):
        metadata = f'{{"fileName": "notes/n{n}.txt"}}'
        http.post(
            "/knowledgesources('fs')/files",
            files={
                "metadata": (None, metadata, "application/json"),
                "content": ("n.txt", f"harbour tram note {n}".encode(), "text/plain"),
            },
        )
    http.delete("/knowledgebases('files')")
    http.delete("/knowledgesources('fs')")


READS: list[Callable[[httpx.Client], httpx.Response]] = [
    lambda http: http.post("/indexes('solo')/docs/search", json={"search": "harbour tram"}),
    lambda http: http.get("/indexes('solo')/docs('d7')"),
    lambda http: http.get("/indexes('chained')/docs/$count"),
    lambda http: http.post(
        "/knowledgebases('chain')/retrieve",
        json={"intents": [{"type": "semantic", "search": "harbour tram"}], **MINIMAL},
    ),
    lambda http: http.post(
        "/knowledgebases('files')/retrieve",
        json={"intents": [{"type": "semantic", "search": "harbour tram"}], **MINIMAL},
    ),
    lambda http: http.get("/knowledgesources('fs')/files"),
    lambda http: http.get("/knowledgesources('fs')/status"),
    lambda http: http.get("/indexes('solo')/stats"),
]


def run_churn(url: str, process: object) -> tuple[collections.Counter[object], list[str]]:
    """Readers and churners for ``CHURN_SECONDS``; return status counts and problems seen."""
    statuses: collections.Counter[object] = collections.Counter()
    problems: list[str] = []
    stop = time.monotonic() + CHURN_SECONDS
    lock = threading.Lock()

    def alive() -> bool:
        return time.monotonic() < stop and process.poll() is None  # type: ignore[attr-defined]

    def reader(offset: int) -> None:
        with client(url) as http:
            n = offset
            while alive():
                n += 1
                try:
                    response = READS[n % len(READS)](http)
                except httpx.TransportError as exc:
                    with lock:
                        problems.append(f"transport error: {exc!r}")
                    return
                with lock:
                    statuses[response.status_code] += 1
                    check(response, problems)

    def churner(step: Callable[[httpx.Client], None]) -> None:
        with client(url) as http:
            while alive():
                try:
                    step(http)
                except httpx.TransportError as exc:
                    with lock:
                        problems.append(f"transport error while churning: {exc!r}")
                    return
                with lock:
                    statuses["cycles"] += 1

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(READERS)]
    threads += [threading.Thread(target=churner, args=(s,)) for s in (churn_index, churn_chain)]
    threads.append(threading.Thread(target=churner, args=(churn_files,)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(CHURN_SECONDS + 60)
    return statuses, problems


def check(response: httpx.Response, problems: list[str]) -> None:
    """Record a response that is not one a deleted resource may give."""
    status = response.status_code
    if status >= 500:
        problems.append(f"{status} on {response.request.url.path}: {response.text[:300]}")
    elif status == 206:
        errors = [r for r in response.json().get("activity", []) if r.get("error")]
        if not errors:
            problems.append(f"206 without an error record: {response.text[:300]}")
    elif status not in (200, 404):
        problems.append(f"{status} on {response.request.url.path}: {response.text[:300]}")


@pytest.mark.parametrize("workers", [1, 2])
def test_deleting_and_recreating_under_read_load(tmp_path, workers):
    with serve_process(tmp_path / "data", workers=workers) as (url, process):
        statuses, problems = run_churn(url, process)
        assert process.poll() is None, f"the server exited with {process.returncode}"
        with client(url) as http:
            assert http.get("/indexes").status_code == 200
            churn_index(http)  # and it still works afterwards
            http.put("/indexes('solo')", json={"name": "solo", **INDEX})
            http.post("/indexes('solo')/docs/index", json={"value": DOCS})
            found = http.post("/indexes('solo')/docs/search", json={"search": "note 7"})
            assert found.json()["value"][0]["id"] == "d7"
    assert problems == []
    assert statuses["cycles"] >= 6, statuses  # the churn really ran
    assert statuses[200] > 0 and statuses[404] > 0, statuses  # reads met both states
