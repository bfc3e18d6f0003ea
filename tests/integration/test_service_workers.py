"""``serve --workers 2``: two processes share one data directory safely.

Changes made through one worker are seen by the other at once (each request checks the
definitions' generation), concurrent writers never lose an update, and ``If-None-Match: *``
lets exactly one of several racing creators win.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import httpx
import pytest
from tests.integration.service_process import KEY, VERSION, serve_process

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]
HEADERS = {"api-key": KEY}


def fresh(url: str) -> httpx.Client:
    """A client whose every request opens a new connection (so either worker may answer)."""
    return httpx.Client(
        base_url=url,
        headers={**HEADERS, "Connection": "close"},
        params=VERSION,
        timeout=60,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def test_two_workers_share_one_data_directory(tmp_path):
    with serve_process(tmp_path / "data", workers=2) as (url, _), fresh(url) as http:
        index = {
            "name": "guides",
            "fields": [
                {"name": "id", "type": "Edm.String", "key": True},
                {"name": "content", "type": "Edm.String"},
            ],
        }
        assert http.put("/indexes('guides')", json=index).status_code == 201
        source = {"name": "ks", "kind": "searchIndex"}
        source["searchIndexParameters"] = {"searchIndexName": "guides"}
        assert http.put("/knowledgesources('ks')", json=source).status_code == 201
        base = {"name": "kb", "knowledgeSources": [{"name": "ks"}]}
        etag = http.put("/knowledgebases('kb')", json=base).json()["@odata.etag"]
        assert {http.get("/knowledgebases('kb')").json()["@odata.etag"] for _ in range(20)} == {
            etag
        }

        def upload(client: int) -> int:
            docs = [
                {"id": f"c{client}-{n}", "content": f"harbour note {client} {n}"} for n in range(50)
            ]
            with fresh(url) as own:
                for start in range(0, 50, 10):
                    batch = {"value": docs[start : start + 10]}
                    assert own.post("/indexes('guides')/docs/index", json=batch).status_code == 200
            return len(docs)

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            assert sum(pool.map(upload, range(4))) == 200
        assert {http.get("/indexes('guides')/docs/$count").text for _ in range(10)} == {"200"}

        changed = {**base, "description": "changed"}
        prefer = {"Prefer": "return=representation"}
        new_etag = http.put("/knowledgebases('kb')", json=changed, headers=prefer).json()[
            "@odata.etag"
        ]
        seen = {http.get("/knowledgebases('kb')").json()["@odata.etag"] for _ in range(20)}
        assert seen == {new_etag}

        racer = {"name": "race", "knowledgeSources": [{"name": "ks"}]}

        def create(_: int) -> int:
            with fresh(url) as own:
                return own.put(
                    "/knowledgebases('race')", json=racer, headers={"If-None-Match": "*"}
                ).status_code

        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            statuses = sorted(pool.map(create, range(6)))
        assert statuses == [201, 412, 412, 412, 412, 412]

        retrieved = http.post(
            "/knowledgebases('kb')/retrieve",
            json={"intents": [{"type": "semantic", "search": "harbour note 3 7"}]},
        )
        assert retrieved.status_code == 200
        assert retrieved.json()["references"][0]["docKey"] == "c3-7"


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(child) for child in listing.read().split()]


def test_a_dead_worker_is_replaced(tmp_path):
    import os
    import signal
    import time

    with serve_process(tmp_path / "data", workers=2) as (url, process), fresh(url) as http:
        workers = children(process.pid)
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            current = children(process.pid)
            if len(current) == 2 and workers[0] not in current:
                break
            time.sleep(0.1)
        assert len(current) == 2 and workers[0] not in current
        assert {http.get("/indexes").status_code for _ in range(10)} == {200}


def test_delete_and_recreate_churn_leaves_no_orphan_lexical_directory(tmp_path):
    """A worker writing an index's lexical directory while the other deletes the index
    re-created the directory after the deletion removed it: an orphan ``*.lexical/`` beside
    no store (issue 27). Now the writer removes what it wrote once the store file is gone."""
    data = tmp_path / "data"
    index = {
        "name": "churn",
        "fields": [
            {"name": "id", "type": "Edm.String", "key": True},
            {"name": "content", "type": "Edm.String"},
        ],
    }
    docs = {"value": [{"id": f"d{n}", "content": f"ferry {n} leaves at dawn"} for n in range(50)]}
    with serve_process(data, workers=2) as (url, _):
        stop = time.monotonic() + 60

        def churn() -> int:
            cycles = 0
            with fresh(url) as http:
                while cycles < 40 and time.monotonic() < stop:
                    http.delete("/indexes('churn')")
                    http.put("/indexes('churn')", json=index)
                    cycles += 1
            return cycles

        def write() -> int:
            writes = 0
            with fresh(url) as http:
                while not done.is_set() and time.monotonic() < stop:
                    http.post("/indexes('churn')/docs/index", json=docs)
                    http.post("/indexes('churn')/docs/search", json={"search": "ferry"})
                    writes += 1
            return writes

        done = threading.Event()
        with fresh(url) as http:
            assert http.put("/indexes('churn')", json=index).status_code == 201
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            writers = [pool.submit(write) for _ in range(2)]
            cycles = pool.submit(churn).result()
            done.set()
            assert cycles > 5 and all(w.result() > 0 for w in writers)
        time.sleep(1.0)  # let the workers finish what they were writing
        stores = data / "stores"
        orphans = [p.name for p in stores.glob("*.lexical") if not p.with_suffix("").exists()]
        assert orphans == [], f"{len(orphans)} orphan lexical directories after {cycles} cycles"
